"""P25: an input-required result (2026-07-28) is never a key's outcome, and the leg that charges is
protected by the same key.

`charge_confirmed` asks the user to confirm before it charges: its first leg answers an
`InputRequiredResult` (an elicitation, and a `requestState`); the continuation, carrying the
`inputResponses` and the echoed `requestState`, charges. The SEP leaves continuations out (L4).
Our position: the question is not kept (the claim is given back), so a continuation that carries
the key of the call it continues claims it, and its outcome is recorded under it; when its answer
is lost, the client sends the very same continuation again (same key, arguments, responses and
state) and gets the replay. Without a key, that retry charges again: the SDK's requestState is
sealed, not single-use.
"""

import pytest
from wire import text_of

pytestmark = pytest.mark.targets("2x-stdio", "2x-http")

KEY = "confirmed-1"
ACCEPTED = {"confirm": {"action": "accept", "content": {"confirm": True}}}
CHARGED = "Charged 100. New balance: 100"


def ask(wire, key=None) -> dict:
    """The first leg: the question, as the server sent it."""
    options = {} if key is None else {"key": key}
    result = wire.call("charge_confirmed", {"amount": 100}, **options)["result"]
    assert result["resultType"] == "input_required", result
    assert set(result["inputRequests"]) == {"confirm"} and result["requestState"]
    return result


def continue_with(wire, question: dict, key=None) -> dict:
    """The continuation: the user's answer and the echoed state, with the same arguments."""
    params = {"inputResponses": ACCEPTED, "requestState": question["requestState"]}
    request_id = wire.send_call("charge_confirmed", {"amount": 100}, **({} if key is None else {"key": key}), **params)
    return wire.reply(request_id)


def test_the_question_is_never_kept_so_asking_again_under_the_key_asks_again(wire):
    first = ask(wire, KEY)
    again = ask(wire, KEY)  # no replay of the question: it was not recorded

    assert wire.ledger() == {"balance": 0, "charges": 0}
    assert first["inputRequests"] == again["inputRequests"]


def test_the_keyed_continuation_charges_and_its_retry_after_a_lost_answer_replays(wire):
    question = ask(wire, KEY)
    charged = continue_with(wire, question, KEY)
    retried = continue_with(wire, question, KEY)  # the answer to the charging leg was lost

    assert text_of(charged) == text_of(retried) == CHARGED
    assert wire.ledger() == {"balance": 100, "charges": 1}


def test_without_a_key_the_retried_charging_leg_charges_twice(wire):
    question = ask(wire)
    continue_with(wire, question)
    continue_with(wire, question)  # the same lost answer, retried with no key: nothing tells them apart

    assert wire.ledger() == {"balance": 200, "charges": 2}


def test_once_the_keyed_exchange_has_charged_its_key_with_other_arguments_is_a_conflict(wire):
    question = ask(wire, KEY)
    continue_with(wire, question, KEY)
    other = wire.call("charge_confirmed", {"amount": 5}, key=KEY)  # a new exchange, reusing the key

    assert other["error"]["data"]["type"] == "idempotency_key_conflict"
    assert wire.ledger() == {"balance": 100, "charges": 1}
