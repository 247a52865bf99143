"""P2, P3, P5, P8, P9, P11', P26 in mcp_idempotency/rules.py itself, in process: each rule at its edges.

The wire tests hold both servers to the same rows; these hold the library's one copy of each rule to
them without a server, so the mutation run (tests/mutation/) sees the rules in seconds.
"""

import hashlib
import math

import pytest
from mcp import types

from mcp_idempotency import rules
from mcp_idempotency.rules import Placement

pytestmark = pytest.mark.targets("2x-stdio", "2x-http")

LONGEST = 8  # a server's maxKeyLength in these rows


# ----------------------------------------------------------------------------
# P2: valid keys
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["k", "k" * LONGEST, " ", "é"], ids=["one", "longest", "space", "non-ascii"])
def test_a_string_of_one_to_the_longest_characters_is_the_key(key):
    assert rules.checked_key(key, LONGEST) == key


def test_a_null_key_is_no_key():
    assert rules.checked_key(None, LONGEST) is None


NOT_KEYS = [
    pytest.param("", "0 characters", id="empty"),
    pytest.param("k" * (LONGEST + 1), f"{LONGEST + 1} characters", id="one-too-long"),
    pytest.param(True, "a boolean", id="boolean"),
    pytest.param(7, "a number", id="integer"),
    pytest.param(7.5, "a number", id="float"),
    pytest.param({"k": 1}, "an object", id="object"),
    pytest.param(["k"], "an array", id="array"),
]


@pytest.mark.parametrize(("value", "got"), NOT_KEYS)
def test_anything_else_is_refused_described_by_its_length_or_json_type_never_echoed(value, got):
    with pytest.raises(rules.InvalidKey) as refused:
        rules.checked_key(value, LONGEST)
    assert str(refused.value) == f"it must be a string of 1 to {LONGEST} characters, got {got}"


# ----------------------------------------------------------------------------
# P3: the same request
# ----------------------------------------------------------------------------


def test_one_spelling_sorts_members_and_writes_whole_floats_as_ints_at_every_depth():
    spelled = rules.as_json_value({"b": [1.0, {"d": -0.0, "c": 2.5}], "a": True})
    assert spelled == {"a": True, "b": [1, {"c": 2.5, "d": 0}]}
    assert list(spelled) == ["a", "b"] and list(spelled["b"][1]) == ["c", "d"]
    assert [type(item) for item in spelled["b"]] == [int, dict] and type(spelled["b"][1]["d"]) is int
    assert spelled["a"] is True  # a boolean is not a number, so it is never made one


def test_the_fingerprint_is_blake2b_of_the_tool_and_arguments_as_compact_json():
    """The digest and its text are stored (P3): a change to either reads every retry across an upgrade as a conflict."""
    expected = hashlib.blake2b(b'["charge",{"a":1,"b":[2,"x"]}]', digest_size=32).digest()
    assert rules.fingerprint("charge", {"b": [2.0, "x"], "a": 1}) == expected


SAME = [
    pytest.param(("t", {"a": 1, "b": 2}), ("t", {"b": 2, "a": 1}), id="member-order"),
    pytest.param(("t", {"n": 1}), ("t", {"n": 1.0}), id="one-and-one-point-zero"),
    pytest.param(("t", None), ("t", {}), id="absent-arguments"),
]
DIFFERENT = [
    pytest.param(("t", {"n": 1}), ("u", {"n": 1}), id="tool"),
    pytest.param(("t", {"n": 1}), ("t", {"n": 2}), id="argument"),
    pytest.param(("t", {"n": 1}), ("t", {"n": True}), id="true-is-not-one"),
    pytest.param(("t", {"n": math.inf}), ("t", {"n": None}), id="infinity-is-not-null"),
    pytest.param(("t", {"s": "\u00e9"}), ("t", {"s": "e\u0301"}), id="nfc-is-not-nfd"),
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_two_calls_that_are_the_same_request_share_a_fingerprint(one, other):
    assert rules.fingerprint(*one) == rules.fingerprint(*other)


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_two_calls_that_are_different_requests_do_not(one, other):
    assert rules.fingerprint(*one) != rules.fingerprint(*other)


def test_the_defaults_are_the_seps_window_bound_share_and_longest_key():
    """P8, P9, P9', P2: the values the SEP and the README name."""
    assert (rules.RETENTION_SECONDS, rules.MAX_RECORDS, rules.MAX_RECORDS_PER_PRINCIPAL) == (86_400, 10_000, 1_000)
    assert rules.MAX_KEY_LENGTH == 255


# ----------------------------------------------------------------------------
# K2, P9': a principal's keys
# ----------------------------------------------------------------------------


def test_a_principal_and_its_keys_are_json_arrays_no_two_spelled_alike():
    assert rules.principal_name(("issuer", "alice")) == '["issuer", "alice"]'
    assert rules.scoped_key(("issuer", "alice"), "k") == '["issuer", "alice", "k"]'
    assert rules.scoped_key(("a", "b"), "c") != rules.scoped_key(("a",), "b/c")


@pytest.mark.parametrize("principal", [("alice",), ("issuer", "alice")])
def test_the_principal_of_a_scoped_key_is_its_principal_name(principal):
    assert rules.principal_of(rules.scoped_key(principal, "k")) == rules.principal_name(principal)


@pytest.mark.parametrize("stored", ["a bare key", '["k"]', '[1, "k"]', '["alice", 2]', '{"alice": "k"}', "[]"])
def test_a_stored_key_that_names_no_principal_is_nobodys(stored):
    assert rules.principal_of(stored) == ""


# ----------------------------------------------------------------------------
# P11', P26: the capability, and where the key is read
# ----------------------------------------------------------------------------


def test_the_capability_advertises_the_window_rounded_down_and_the_run_bounds_rounded_up():
    assert rules.capability(LONGEST, 1.9, 0.1, 2.5) == {
        "maxKeyLength": LONGEST,
        "retentionSeconds": 1,
        "deadlineSeconds": 1,
        "leaseSeconds": 3,
    }


PARAMS = {"idempotencyKey": "in params", "_meta": {rules.META_KEY: "in meta"}}


@pytest.mark.parametrize(("placement", "key"), [(Placement.PARAMS, "in params"), (Placement.META, "in meta")])
def test_each_placement_reads_its_own_place_only(placement, key):
    assert rules.sent_key(PARAMS, placement) == key


@pytest.mark.parametrize("params", [{"idempotencyKey": "k"}, {"_meta": "not an object"}, {"_meta": {"other": "k"}}])
def test_the_meta_placement_finds_no_key_outside_its_meta_key(params):
    assert rules.sent_key(params, Placement.META) is None


def test_the_params_placement_finds_no_key_in_meta():
    assert rules.sent_key({"_meta": {rules.META_KEY: "k"}}, Placement.PARAMS) is None


SETTINGS = {"maxKeyLength": LONGEST, "retentionSeconds": 60}


def test_the_params_placement_advertises_under_tools_beside_what_is_there():
    capabilities = {"tools": {"listChanged": True}}
    rules.advertise(capabilities, Placement.PARAMS, SETTINGS)
    assert capabilities == {"tools": {"listChanged": True, "idempotency": SETTINGS}}


def test_the_meta_placement_advertises_its_extension_beside_the_others_and_nowhere_else():
    capabilities = {"tools": {}, "extensions": {"other/ext": {}}}
    rules.advertise(capabilities, Placement.META, SETTINGS)
    assert capabilities == {"tools": {}, "extensions": {"other/ext": {}, rules.EXTENSION_ID: SETTINGS}}


def test_the_meta_placement_makes_the_extensions_where_there_are_none():
    capabilities: dict = {"extensions": None}
    rules.advertise(capabilities, Placement.META, SETTINGS)
    assert capabilities == {"extensions": {rules.EXTENSION_ID: SETTINGS}}


# ----------------------------------------------------------------------------
# P5, P5': rejections on the wire
# ----------------------------------------------------------------------------

RETRYABLE = {rules.IN_PROGRESS: True, rules.STORE_FULL: True, rules.STORE_UNAVAILABLE: True}
FINAL = {rules.INVALID_KEY: False, rules.CONFLICT: False}


@pytest.mark.parametrize(("kind", "retryable"), [*RETRYABLE.items(), *FINAL.items()])
def test_a_rejection_names_its_kind_its_key_and_whether_to_retry(kind, retryable):
    assert rules.rejection(kind, "k") == {
        "code": -32602,
        "message": rules.MESSAGES[kind],
        "data": {"type": kind, "retryable": retryable, "idempotencyKey": "k"},
    }


def test_a_rejection_without_a_key_names_none_and_its_detail_follows_the_message():
    refused = rules.rejection(rules.INVALID_KEY, detail="got 0 characters")
    assert refused["message"] == "invalid idempotencyKey; got 0 characters"
    assert refused["data"] == {"type": rules.INVALID_KEY, "retryable": False}


def test_the_codes_kept_for_the_layer_are_json_rpcs_and_mcps_own():
    """P5, P6': invalid params for a rejection, internal error for what escapes a tool, and MCP's URL elicitation."""
    assert rules.ERROR_CODE == types.INVALID_PARAMS
    assert rules.INTERNAL_ERROR["code"] == types.INTERNAL_ERROR
    assert rules.URL_ELICITATION_REQUIRED == types.URL_ELICITATION_REQUIRED


# ----------------------------------------------------------------------------
# P30: what a retry declares; P27: the downstream key
# ----------------------------------------------------------------------------

UI = {"mimeTypes": ["text/html"]}


def test_a_request_declares_what_its_meta_holds_under_the_client_capabilities_and_nothing_else():
    meta = {"_meta": {rules.CLIENT_CAPABILITIES: {"elicitation": {}}, "other": {"sampling": {}}}}
    assert rules.declared(meta) == {"elicitation": {}}
    assert rules.declared({}) == rules.declared({"_meta": {rules.CLIENT_CAPABILITIES: "tasks"}}) == {}


@pytest.mark.parametrize(
    ("original", "retry", "missing"),
    [
        ({}, {"elicitation": {}}, {}),
        ({"elicitation": {}}, {"elicitation": {"form": {}}}, {}),  # its settings aside: declared is declared
        ({"elicitation": {}, "sampling": {}}, {"sampling": {}}, {"elicitation": {}}),
        ({"extensions": {"ui": UI, "tasks": {}}}, {"extensions": {"tasks": {}}}, {"extensions": {"ui": UI}}),
        ({"extensions": {"ui": UI}}, {}, {"extensions": {"ui": UI}}),
        ({"extensions": {"ui": UI}}, {"extensions": "all"}, {"extensions": {"ui": UI}}),
        ({"extensions": {}}, {}, {}),
    ],
)
def test_a_retry_is_missing_each_capability_and_extension_the_original_declared_and_it_does_not(
    original, retry, missing
):
    assert rules.undeclared(original, retry) == missing


def test_the_downstream_key_is_one_per_principals_key_and_request_and_reveals_neither():
    key = rules.scoped_key(("issuer", "alice"), "order-1")
    forwarded = rules.downstream_key(key, b"fingerprint")
    expected = hashlib.sha256(b"mcp-idempotency downstream key\0" + key.encode() + b"\0fingerprint").hexdigest()
    assert forwarded == expected and len(forwarded) == 64
    assert "order-1" not in forwarded and "alice" not in forwarded
    assert forwarded != rules.downstream_key(rules.scoped_key(("issuer", "bob"), "order-1"), b"fingerprint")
    assert forwarded != rules.downstream_key(key, b"another request")
