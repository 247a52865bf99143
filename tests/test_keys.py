"""P1, P2, P5: where the key is read, which keys are valid, and how a bad key is refused.

Every row runs against one server.py: each row uses keys of its own and measures
the ledger before and after, so the rows cannot disturb each other.
"""

import json

import pytest
from wire import ABSENT, INVALID_KEY, ONE_PER_SDK, Wire, error_type

# Rules the transport adds nothing to: the quick set plays them on one real transport per SDK, the slow set on the rest.
pytestmark = pytest.mark.quick_targets(*ONE_PER_SDK)

ONE_MIB = 1024 * 1024


def charges(wire: Wire) -> int:
    """How many charges the ledger holds: ground truth, read without a key."""
    return wire.ledger()["charges"]


def decisions(log: str) -> list[str]:
    """The idempotency layer's decisions in a stretch of server log: "claimed", "replayed", ...,
    leaving out the "no key" lines of the test's own get_balance calls."""
    # Lines look like "idempotency: replayed: key='k'"; SDK chatter has another prefix.
    return [
        line.removeprefix("idempotency: ").split(":")[0]
        for line in log.splitlines()
        if line.startswith("idempotency: ") and not line.endswith("tool=get_balance")
    ]


# ----------------------------------------------------------------------------
# P2, P5: an invalid key is refused before anything runs
# ----------------------------------------------------------------------------

OVERSIZED_KEYS = [
    pytest.param("k" * 256, id="256_characters"),
    pytest.param("k" * ONE_MIB, id="1_MiB_string"),
]

INVALID_KEYS = [
    pytest.param(42, id="number"),
    pytest.param(True, id="boolean"),
    pytest.param({"key": "k"}, id="object"),
    pytest.param(["k"], id="array"),
    pytest.param("", id="empty_string"),
    *OVERSIZED_KEYS,
]


@pytest.mark.parametrize("bad_key", INVALID_KEYS)
def test_invalid_key_is_refused_before_the_tool_runs(shared_wire, bad_key):
    before, log_seen = charges(shared_wire), len(shared_wire.log())

    response = shared_wire.charge(100, key=bad_key)

    assert response["error"]["code"] == -32602
    assert response["error"]["data"] == {"type": INVALID_KEY, "retryable": False}  # P5': never worth resending
    assert charges(shared_wire) == before  # nothing ran
    # One log line for the one decision; no "claimed" or "recorded": nothing was claimed.
    assert decisions(shared_wire.log()[log_seen:]) == ["invalid key"]
    # Nothing was left behind either: the same call without the bad key runs normally, once.
    assert shared_wire.charge(100)["result"]["isError"] is False
    assert charges(shared_wire) == before + 1


@pytest.mark.parametrize("oversized_key", OVERSIZED_KEYS)
def test_oversized_key_is_not_echoed_back(shared_wire, oversized_key):
    log_seen = len(shared_wire.log())

    line = shared_wire.raw_reply(shared_wire.send_call("charge_guarded", {"amount": 100}, oversized_key))

    # P2: a megabyte of key must not come back as a megabyte of error, nor fill the log.
    assert error_type(json.loads(line)) == INVALID_KEY
    assert len(line) < 1024
    assert oversized_key not in line
    assert len(shared_wire.log()[log_seen:]) < 1024


# ----------------------------------------------------------------------------
# P2: valid keys, however odd, execute once and then replay
# ----------------------------------------------------------------------------

VALID_KEYS = [
    pytest.param("k", id="1_character"),
    pytest.param("k" * 255, id="255_characters"),
    pytest.param("🔑", id="emoji"),
    # 255 code points, but 510 UTF-16 units and 1020 UTF-8 bytes: the limit counts characters.
    pytest.param("🔑" * 255, id="255_emoji"),
    pytest.param("nul\x00inside", id="NUL_inside"),
    pytest.param("newline\ninside", id="newline_inside"),
]


@pytest.mark.parametrize("key", VALID_KEYS)
def test_valid_key_executes_once_then_replays(shared_wire, key):
    before, log_seen = charges(shared_wire), len(shared_wire.log())

    original = shared_wire.charge(100, key=key)
    retry = shared_wire.charge(100, key=key)

    assert original["result"]["isError"] is False
    assert retry["result"] == original["result"]
    assert charges(shared_wire) == before + 1
    # One line per decision, even for a key with a newline in it (the log quotes the key).
    assert decisions(shared_wire.log()[log_seen:]) == ["claimed", "recorded", "replayed"]


def test_nfc_and_nfd_spellings_are_different_keys(shared_wire):
    # P3 applies to keys as to arguments: code points as sent, no Unicode normalisation.
    nfc, nfd = "caf\u00e9-nfc-nfd", "cafe\u0301-nfc-nfd"
    before, log_seen = charges(shared_wire), len(shared_wire.log())

    shared_wire.charge(100, key=nfc)
    shared_wire.charge(100, key=nfd)

    assert charges(shared_wire) == before + 2
    assert decisions(shared_wire.log()[log_seen:]) == ["claimed", "recorded", "claimed", "recorded"]


@pytest.mark.parametrize("no_key", [pytest.param(None, id="null"), pytest.param(ABSENT, id="absent")])
def test_null_or_absent_key_means_no_key(shared_wire, no_key):
    before, log_seen = charges(shared_wire), len(shared_wire.log())

    first = shared_wire.charge(100, key=no_key)
    second = shared_wire.charge(100, key=no_key)

    assert first["result"]["isError"] is False and second["result"]["isError"] is False
    assert charges(shared_wire) == before + 2  # each call runs, as it did before SEP-3182
    assert decisions(shared_wire.log()[log_seen:]) == ["no key", "no key"]  # straight to the tool


# ----------------------------------------------------------------------------
# P1: only params.idempotencyKey is a key
# ----------------------------------------------------------------------------

ELSEWHERE = [
    # FastMCP ignores an argument its tool does not declare (on 1.29.1 and 1.30.0 alike),
    # so the call succeeds; what matters is that nothing is deduplicated.
    pytest.param({"arguments": {"amount": 100, "idempotencyKey": "p1-in-arguments"}}, id="inside_arguments"),
    pytest.param({"arguments": {"amount": 100}, "_meta": {"idempotencyKey": "p1-in-meta"}}, id="inside_meta"),
]


@pytest.mark.parametrize("params", ELSEWHERE)
def test_field_named_idempotency_key_elsewhere_is_not_a_key(shared_wire, params):
    before, log_seen = charges(shared_wire), len(shared_wire.log())

    first = shared_wire.call("charge_guarded", **params)
    second = shared_wire.call("charge_guarded", **params)

    assert first["result"]["isError"] is False and second["result"]["isError"] is False
    assert charges(shared_wire) == before + 2
    assert decisions(shared_wire.log()[log_seen:]) == ["no key", "no key"]


# ----------------------------------------------------------------------------
# W2: only tools/call is covered
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["w2-key", 7], ids=["valid_key", "invalid_key"])
def test_key_on_a_method_other_than_tools_call_is_not_examined(shared_wire, key):
    log_seen = len(shared_wire.log())

    listed = shared_wire.request("tools/list", {"idempotencyKey": key})
    again = shared_wire.request("tools/list", {"idempotencyKey": key})

    assert "result" in listed and again["result"] == listed["result"]  # served as usual, never rejected
    assert decisions(shared_wire.log()[log_seen:]) == []
