"""P25: an input-required result (2026-07-28) is never a key's outcome, and the leg that charges is
protected by the same key, in either form of the result.

`charge_confirmed` asks the user to confirm before it charges: its first leg answers an
`InputRequiredResult` with a question (`inputRequests`) and a `requestState`; the continuation,
carrying the `inputResponses` and the echoed `requestState`, charges. `charge_deferred` answers
the other form, only a `requestState` (nothing to ask, the call to be sent again); the
continuation, carrying that state alone, charges. The SEP leaves continuations out (L4).
Our position: the first leg's answer is not kept (the claim is given back), so a continuation
that carries the key of the call it continues claims it, and its outcome is recorded under it;
when its answer is lost, the client sends the very same continuation again (same key,
arguments, responses if any, and state) and gets the replay. Without a key, that retry charges
again: the SDK's requestState is sealed, not single-use.
"""

import secrets
import subprocess

import pytest
from wire import SDK2_SERVER, sdk2_python, text_of

# The 2.x layer's rules, which the transport adds nothing to: the quick set plays them over HTTP, the slow set on stdio.
pytestmark = [pytest.mark.targets("2x-stdio", "2x-http"), pytest.mark.quick_targets("2x-http")]

KEY = "confirmed-1"
ACCEPTED = {"confirm": {"action": "accept", "content": {"confirm": True}}}
CHARGED = "Charged 100. New balance: 100"
# Each form of the result: the tool that answers it, what its first leg asks for, and what the
# continuation carries besides the echoed requestState.
FORMS = {
    "question": ("charge_confirmed", {"confirm"}, {"inputResponses": ACCEPTED}),
    "state-only": ("charge_deferred", set(), {}),
}
each_form = pytest.mark.parametrize("form", FORMS)


def ask(wire, form: str, key=None) -> dict:
    """The first leg: the input-required result, as the server sent it."""
    tool, asked, _ = FORMS[form]
    options = {} if key is None else {"key": key}
    result = wire.call(tool, {"amount": 100}, **options)["result"]
    assert result["resultType"] == "input_required", result
    assert set(result.get("inputRequests", {})) == asked and result["requestState"]
    return result


def continue_with(wire, form: str, first_leg: dict, key=None) -> dict:
    """The continuation: the user's answer (if asked) and the echoed state, with the same arguments."""
    tool, _, answers = FORMS[form]
    params = {**answers, "requestState": first_leg["requestState"]}
    request_id = wire.send_call(tool, {"amount": 100}, **({} if key is None else {"key": key}), **params)
    return wire.reply(request_id)


@each_form
def test_the_first_leg_is_never_kept_so_sending_it_again_under_the_key_asks_again(wire, form):
    first = ask(wire, form, KEY)
    again = ask(wire, form, KEY)  # no replay of the first leg's answer: it was not recorded

    assert wire.ledger() == {"balance": 0, "charges": 0}
    assert first.get("inputRequests") == again.get("inputRequests")


@each_form
def test_the_keyed_continuation_charges_and_its_retry_after_a_lost_answer_replays(wire, form):
    first_leg = ask(wire, form, KEY)
    charged = continue_with(wire, form, first_leg, KEY)
    retried = continue_with(wire, form, first_leg, KEY)  # the answer to the charging leg was lost

    assert text_of(charged) == text_of(retried) == CHARGED
    assert wire.ledger() == {"balance": 100, "charges": 1}


@each_form
def test_without_a_key_the_retried_charging_leg_charges_twice(wire, form):
    first_leg = ask(wire, form)
    continue_with(wire, form, first_leg)
    continue_with(wire, form, first_leg)  # the same lost answer, retried with no key: nothing tells them apart

    assert wire.ledger() == {"balance": 200, "charges": 2}


@each_form
def test_once_the_keyed_exchange_has_charged_its_first_leg_sent_again_gets_the_charge_replayed(wire, form):
    first_leg = ask(wire, form, KEY)
    continue_with(wire, form, first_leg, KEY)
    tool, _, _ = FORMS[form]
    restarted = wire.call(tool, {"amount": 100}, key=KEY)  # the exchange started over, under the same key

    assert text_of(restarted) == CHARGED
    assert wire.ledger() == {"balance": 100, "charges": 1}


def test_once_the_keyed_exchange_has_charged_its_key_with_other_arguments_is_a_conflict(wire):
    question = ask(wire, "question", KEY)
    continue_with(wire, "question", question, KEY)
    other = wire.call("charge_confirmed", {"amount": 5}, key=KEY)  # a new exchange, reusing the key

    assert other["error"]["data"]["type"] == "idempotency_key_conflict"
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.fixture
def shared(tmp_path):
    """Two instances' options: one store, and one secret to seal requestState with."""
    key_file = tmp_path / "state.key"
    key_file.write_text(secrets.token_hex(32))
    return ("--store", f"sqlite:{tmp_path / 'shared.db'}"), ("--request-state-key-file", str(key_file))


def test_a_keyed_retry_on_another_instance_replays_when_the_instances_share_the_state_key(spawn, shared):
    store, state_key = shared
    first, second = spawn(*store, *state_key), spawn(*store, *state_key)
    question = ask(first, "question", KEY)
    continue_with(first, "question", question, KEY)
    retried = continue_with(second, "question", question, KEY)  # the load balancer sent the retry elsewhere

    assert text_of(retried) == CHARGED
    assert second.ledger() == {"balance": 100, "charges": 1}


def test_an_instance_sealing_with_a_key_of_its_own_refuses_another_instances_state_before_any_key_is_read(
    spawn, shared
):
    store, state_key = shared
    first, second = spawn(*store, *state_key), spawn(*store)
    question = ask(first, "question", KEY)
    continue_with(first, "question", question, KEY)
    retried = continue_with(second, "question", question, KEY)

    assert retried["error"]["code"] == -32602 and retried["error"]["data"]["reason"] == "invalid_request_state"
    assert second.ledger() == {"balance": 100, "charges": 1}


def test_a_state_key_file_shorter_than_32_bytes_is_refused_before_anything_is_served(tmp_path):
    short = tmp_path / "short.key"
    short.write_text("twelve bytes")
    ran = subprocess.run(
        [sdk2_python(), *SDK2_SERVER, "--placement", "params", "--request-state-key-file", str(short)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2 and ran.stdout == ""
    assert "short.key holds 12 bytes; the key needs at least 32 bytes of secret randomness" in ran.stderr
