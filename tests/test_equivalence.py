"""P3 where our servers' SDKs set the limit: numbers a double cannot hold. Each row sends one
spelling under a fresh key, then the other spelling under that key, end to end.

The rows every server must pass (member order, `1` and `1.0`, escapes, `_meta`, conflicts)
are the conformance kit's (conformance/kit.py, run on every target by
test_kit.py::test_kit_equivalence_rows_pass_on_every_target): one body of checks. The rows
here pin what each of our SDKs does past that, so that a change in one shows up.

The spellings are raw JSON text on the wire, since json.dumps cannot write `9007199254740993.0`
or `1e400`. FastMCP ignores members its tool does not declare (1.29.1 and 1.30.0 alike), so a
`note` member carries the values; the fingerprint covers all of `arguments` regardless.
"""

import json
import uuid

import pytest

from wire import CONFLICT, Wire


def charge(arguments: str) -> str:
    """The params members of a charge_guarded call, with `arguments` spelled exactly as given."""
    return f'"name":"charge_guarded","arguments":{arguments}'


def send(wire: Wire, members: str, key: str, request_id: str) -> dict:
    """A tools/call whose params are `members` as written, plus the key; its response."""
    wire.send_spelled(request_id, "tools/call", f'{members},"idempotencyKey":{json.dumps(key)}')
    return wire.reply(request_id)


def first_then_retry(wire: Wire, first: str, retry: str) -> tuple[dict, dict, str]:
    """Send `first` under a fresh key, then `retry` under the same key; return both and the key."""
    key = str(uuid.uuid4())
    original = send(wire, first, key, f"{key}/first")
    assert original["result"]["isError"] is False  # the row tests what it claims: the first call ran
    # An unkeyed charge moves the balance, so a second execution of any of these tools
    # (charge_guarded's text and get_balance both show the balance) could not return
    # the original's result: an equal result can only be a replay.
    wire.charge(7)
    before = wire.ledger()
    answer = send(wire, retry, key, f"{key}/retry")
    assert wire.ledger() == before  # neither a replay nor a conflict runs anything
    return original, answer, key


# Where P3 cannot be met, on either SDK: S3 is broken for these spellings. Both
# transports parse every message before dispatch and read a number with a fraction
# or an exponent as an IEEE double, so the dispatch layer sees the double, never
# the text: 9007199254740993.0 arrives as 2^53. A double overflows at 1e400: the
# 1.x SDK re-serialises the message and the infinity becomes null; the 2.x SDK
# keeps the infinity. The rows pin what happens on each, so that a change in an
# SDK shows up here; README.md and tests/CONFORMANCE.md state the deviation.
# Outcome per SDK: (on 1.x, on 2.x).
PARSER_LIMITS = [
    # 9007199254740993.0 is 2^53 + 1, but its double is 2^53: replayed as if equal.
    pytest.param(charge('{"amount":100,"note":9007199254740993.0}'),
                 charge('{"amount":100,"note":9007199254740992}'), ("replay", "replay"),
                 id="2^53+1_as_float_replays_2^53"),
    # The same value written as an integer stays exact, so the two spellings differ.
    pytest.param(charge('{"amount":100,"note":9007199254740993.0}'),
                 charge('{"amount":100,"note":9007199254740993}'), ("conflict", "conflict"),
                 id="2^53+1_as_float_conflicts_as_integer"),
    # Two different numbers past a double's range are the same infinity (or null).
    pytest.param(charge('{"amount":100,"note":1e400}'), charge('{"amount":100,"note":1e401}'), ("replay", "replay"),
                 id="1e400_replays_1e401"),
    # On 1.x the infinity arrives as null; 2.x keeps it apart from null.
    pytest.param(charge('{"amount":100,"note":1e400}'), charge('{"amount":100,"note":null}'), ("replay", "conflict"),
                 id="1e400_vs_null"),
]

@pytest.mark.parametrize(("first", "retry", "outcomes"), PARSER_LIMITS)
def test_numbers_a_double_cannot_hold_compare_as_the_sdk_parsed_them(shared_wire, first, retry, outcomes):
    original, answer, _ = first_then_retry(shared_wire, first, retry)

    if outcomes[shared_wire.target.startswith("2x")] == "replay":
        assert answer.get("result") == original["result"]
    else:
        assert answer["error"]["data"]["type"] == CONFLICT
