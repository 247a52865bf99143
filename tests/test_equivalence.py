"""P3 where our servers' SDKs set the limit: numbers a double cannot hold. Each row sends one
spelling under a fresh key, then the other spelling under that key, end to end.

The sentence this project proposes for them: integers compare exactly, and a server whose
parser cannot hold an integer exactly MUST refuse a keyed call carrying one rather than
compare it rounded; fraction and exponent forms that parse to one double MAY be equal.
Python parses integers exactly, so both Python servers compare them exactly; the TypeScript
server (JSON.parse: doubles) refuses them, and so refuses to charge such an amount.

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
from wire import CONFLICT, ONE_PER_SDK, Wire, text_of

# Rules the transport adds nothing to: the quick set plays them on one real transport per SDK, the slow set on the rest.
pytestmark = pytest.mark.quick_targets(*ONE_PER_SDK)


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


# Fraction and exponent forms, on either SDK. Both transports parse every message
# before dispatch and read a number with a fraction or an exponent as an IEEE double,
# so the dispatch layer sees the double, never the text: 9007199254740993.0 arrives
# as 2^53. Two such spellings of one double MAY be equal, as the sentence has it. A
# double overflows at 1e400: the 1.x SDK re-serialises the message and the infinity
# becomes null, so on 1.x alone 1e400 replays a call made with null (a deviation:
# null is no number); the 2.x SDK keeps the infinity. The rows pin what happens on
# each, so that a change in an SDK shows up here; README.md and tests/CONFORMANCE.md
# state it. Outcome per SDK: (on 1.x, on 2.x).
PARSER_LIMITS = [
    # 9007199254740993.0 is 2^53 + 1, but its double is 2^53: replayed as if equal.
    pytest.param(
        charge('{"amount":100,"note":9007199254740993.0}'),
        charge('{"amount":100,"note":9007199254740992}'),
        ("replay", "replay"),
        id="2^53+1_as_float_replays_2^53",
    ),
    # The same value written as an integer stays exact, so the two spellings differ.
    pytest.param(
        charge('{"amount":100,"note":9007199254740993.0}'),
        charge('{"amount":100,"note":9007199254740993}'),
        ("conflict", "conflict"),
        id="2^53+1_as_float_conflicts_as_integer",
    ),
    # Two different numbers past a double's range are the same infinity (or null).
    pytest.param(
        charge('{"amount":100,"note":1e400}'),
        charge('{"amount":100,"note":1e401}'),
        ("replay", "replay"),
        id="1e400_replays_1e401",
    ),
    # On 1.x the infinity arrives as null; 2.x keeps it apart from null.
    pytest.param(
        charge('{"amount":100,"note":1e400}'),
        charge('{"amount":100,"note":null}'),
        ("replay", "conflict"),
        id="1e400_vs_null",
    ),
]


@pytest.mark.parametrize(("first", "retry", "outcomes"), PARSER_LIMITS)
def test_fraction_and_exponent_forms_compare_as_the_doubles_they_parse_to(shared_wire, first, retry, outcomes):
    original, answer, _ = first_then_retry(shared_wire, first, retry)

    if outcomes[shared_wire.target.startswith("2x")] == "replay":
        assert answer.get("result") == original["result"]
    else:
        assert answer["error"]["data"]["type"] == CONFLICT


# Integers, on every Python target: exact, however large, in both directions.
BEYOND_DOUBLES = [
    pytest.param("9007199254740993", "9007199254740992", "conflict", id="2^53+1_conflicts_with_2^53"),
    pytest.param("9007199254740992", "9007199254740993", "conflict", id="2^53_conflicts_with_2^53+1"),
    pytest.param("9007199254740993", "9007199254740993", "replay", id="2^53+1_replays_itself"),
    pytest.param("9007199254740992", "9007199254740992", "replay", id="2^53_replays_itself"),
]


@pytest.mark.parametrize(("first", "retry", "outcome"), BEYOND_DOUBLES)
def test_integers_beyond_2_53_compare_exactly(shared_wire, first, retry, outcome):
    original, answer, _ = first_then_retry(
        shared_wire, charge(f'{{"amount":100,"note":{first}}}'), charge(f'{{"amount":100,"note":{retry}}}')
    )

    if outcome == "replay":
        assert answer.get("result") == original["result"]
    else:
        assert answer["error"]["data"]["type"] == CONFLICT


BEYOND = 2**53 + 1  # 9007199254740993: a double would charge 9007199254740992


@pytest.mark.parametrize("key", [None, "order-1"], ids=["unkeyed", "keyed"])
def test_an_amount_beyond_2_53_is_charged_exactly(wire, key):
    charged = wire.charge(BEYOND, **({} if key is None else {"key": key}))

    assert charged["result"]["isError"] is False, charged
    assert wire.ledger() == {"balance": BEYOND, "charges": 1}


def test_a_whole_float_amount_beyond_2_53_is_refused_not_charged_rounded(wire):
    """9007199254740993.0 parses as 2^53: no server can know which amount was meant, so none is charged."""
    for key in ("order-1", None):
        members = charge('{"amount":9007199254740993.0}') + ("" if key is None else f',"idempotencyKey":"{key}"')
        wire.send_spelled(f"refused-{key}", "tools/call", members)
        refused = wire.reply(f"refused-{key}")
        assert refused["result"]["isError"] is True, refused
    assert wire.ledger() == {"balance": 0, "charges": 0}


# The TypeScript server: JSON.parse reads every number as a double, so it refuses what it cannot hold.


@pytest.fixture
def ts_wire(spawn_typescript):
    """The TypeScript server (typescript/server.ts, compiled) over stdio, after the 2025 handshake."""
    return spawn_typescript()


UNSAFE_INTEGER = "arguments hold an integer beyond 2^53, which this server cannot compare exactly"


@pytest.mark.parametrize(
    "arguments",
    [
        '{"amount":100,"note":9007199254740993}',
        '{"amount":9007199254740992}',
        '{"amount":100,"note":{"deep":[1,9007199254740993.0]}}',
    ],
    ids=["2^53+1_in_a_note", "2^53_as_the_amount", "2^53_as_a_whole_float_deep_inside"],
)
def test_typescript_server_refuses_a_keyed_call_holding_an_integer_beyond_2_53(ts_wire, arguments):
    ts_wire.send_spelled("refused", "tools/call", f'{charge(arguments)},"idempotencyKey":"order-1"')
    refused = ts_wire.reply("refused")

    assert refused["error"] == {"code": -32602, "message": UNSAFE_INTEGER}  # no data.type: no idempotency rejection
    assert ts_wire.ledger() == {"balance": 0, "charges": 0}  # nothing ran
    # Nothing was recorded either: the key is still new, and a call it can compare runs under it.
    assert text_of(ts_wire.charge(100, key="order-1")) == "Charged 100. New balance: 100"
    assert ts_wire.ledger() == {"balance": 100, "charges": 1}


def test_typescript_server_refuses_an_unkeyed_amount_beyond_2_53_and_compares_safe_integers_as_before(ts_wire):
    refused = ts_wire.charge(BEYOND)
    assert refused["result"]["isError"] is True and "<=9007199254740991" in json.dumps(refused["result"]), refused
    assert ts_wire.ledger() == {"balance": 0, "charges": 0}
    # Below 2^53 nothing changed: one key, one charge, a conflict for another integer.
    largest = 2**53 - 1
    charged = ts_wire.charge(largest, key="order-2")
    assert text_of(charged) == f"Charged {largest}. New balance: {largest}"
    assert ts_wire.charge(largest, key="order-2")["result"] == charged["result"]
    assert ts_wire.charge(largest - 1, key="order-2")["error"]["data"]["type"] == CONFLICT
    assert ts_wire.ledger() == {"balance": largest, "charges": 1}
