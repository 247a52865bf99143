"""P4, P6, P13, S2a: recorded outcomes under changed retries, stale replays, and the order of checks.

Which kinds of outcome are kept, and byte-for-byte replay, are in test_outcome_kinds.py."""

import json

import mcp.types as types
import pytest
from conftest import stored_keys
from mcp.shared.exceptions import McpError
from wire import CONFLICT, ONE_PER_SDK, error_type, keyed_call_line, new_key, text_of

from client_demo import tool_call

# Rules the transport adds nothing to: the quick set plays them on one real transport per SDK, the slow set on the rest.
pytestmark = pytest.mark.quick_targets(*ONE_PER_SDK)

CHANGED_RETRIES = [
    pytest.param(
        ("charge_guarded", {"amount": 100}), ("charge_guarded", {"amount": 200}), id="success_then_other_amount"
    ),
    pytest.param(
        ("charge_guarded", {"amount": 0}), ("charge_guarded", {"amount": 100}), id="tool_error_then_corrected_amount"
    ),
    pytest.param(("no_such_tool", {}), ("get_balance", {}), id="unknown_tool_then_real_tool"),
]


@pytest.mark.parametrize(("original", "changed"), CHANGED_RETRIES)
def test_changed_retry_of_a_recorded_outcome_is_a_conflict(shared_wire, original, changed):
    # A recorded tool error is an outcome like any other: fixing the arguments needs a new key.
    key = new_key()
    shared_wire.call(*original, key)
    before = shared_wire.ledger()

    response = shared_wire.call(*changed, key)

    assert response["error"]["code"] == -32602
    assert response["error"]["data"] == {"type": CONFLICT, "retryable": False, "idempotencyKey": key}
    assert shared_wire.ledger() == before


def test_conflict_is_not_recorded_so_the_original_still_replays(shared_wire):
    key = new_key()
    _, original = keyed_call_line(shared_wire, "charge_guarded", {"amount": 100}, key)
    assert error_type(shared_wire.charge(200, key=key)) == CONFLICT
    before = shared_wire.ledger()

    _, replay = keyed_call_line(shared_wire, "charge_guarded", {"amount": 100}, key)

    assert replay == original
    assert shared_wire.ledger() == before


REJECTED = [
    pytest.param(tool_call("charge_guarded", {"amount": 100}, ""), id="invalid_key_empty"),
    pytest.param(tool_call("charge_guarded", {"amount": 100}, "k" * 256), id="invalid_key_too_long"),
    pytest.param(tool_call("charge_guarded", {"amount": 100}, 7), id="invalid_key_number"),
    pytest.param(tool_call("charge_guarded", {"amount": 200}, "recorded"), id="conflict"),
]


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
@pytest.mark.parametrize("rejected", REJECTED)
async def test_rejection_leaves_the_store_as_it_found_it(dedup, rejected):
    await dedup.idempotent_call_tool(tool_call("charge_guarded", {"amount": 100}, "recorded"))
    store_before = {
        key: (record.fingerprint, record.outcome, record.expires_at) for key, record in dedup._dedup_store.items()
    }

    with pytest.raises(McpError):
        await dedup.idempotent_call_tool(rejected)

    assert {
        key: (record.fingerprint, record.outcome, record.expires_at) for key, record in dedup._dedup_store.items()
    } == store_before
    assert dedup.ledger == {"balance": 100, "charges": 1}


# ----------------------------------------------------------------------------
# S2a, P13: the replay is the outcome as recorded, whatever the tool's hints
# ----------------------------------------------------------------------------


def test_replay_is_the_recorded_outcome_not_refreshed(shared_wire):
    key = new_key()
    original = shared_wire.charge(100, key=key)
    shared_wire.charge(7)  # the world moves on: the balance the original reported is now stale

    replay = shared_wire.charge(100, key=key)

    assert replay["result"] == original["result"]
    stale_balance = int(text_of(original).rsplit(" ", 1)[1])  # "Charged 100. New balance: N"
    assert shared_wire.ledger()["balance"] == stale_balance + 7


def test_read_only_tool_is_deduplicated_like_any_other(shared_wire):
    tools = {tool["name"]: tool for tool in shared_wire.request("tools/list")["result"]["tools"]}
    assert tools["get_balance"]["annotations"]["readOnlyHint"] is True  # the row uses a read-only tool
    key = new_key()
    recorded = shared_wire.call("get_balance", {}, key)
    shared_wire.charge(7)

    replay = shared_wire.call("get_balance", {}, key)

    # P13: no exemption for readOnlyHint: the recorded balance comes back, not today's.
    assert replay["result"] == recorded["result"]
    assert json.loads(text_of(replay)) != shared_wire.ledger()  # so the tool did not run again


# ----------------------------------------------------------------------------
# P4: a conflict is found before "in progress"; a call without a key is untouched
# ----------------------------------------------------------------------------


def test_different_arguments_while_the_original_runs_is_a_conflict_not_in_progress(spawn):
    wire = spawn("--charge-delay", "1")
    key = new_key()
    original_id = wire.send_call("charge_guarded", {"amount": 100}, key)
    wire.wait_for_log(f"claimed: key={key!r}")  # the original has claimed the key and is charging

    changed = wire.charge(200, key=key)

    assert changed["error"]["data"] == {"type": CONFLICT, "retryable": False, "idempotencyKey": key}
    assert not wire.answered(original_id)  # answered at once, while the original was still running
    assert wire.reply(original_id)["result"]["isError"] is False
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_call_without_a_key_goes_straight_to_fastmcp(dedup, monkeypatch):
    # Backward compatibility: no key, no idempotency layer; every call is FastMCP's own.
    fastmcp_call_tool, handled = dedup.call_tool, []

    async def spy(request: types.CallToolRequest) -> types.ServerResult:
        handled.append(await fastmcp_call_tool(request))
        return handled[-1]

    monkeypatch.setattr(dedup, "call_tool", spy)

    first = await dedup.idempotent_call_tool(tool_call("charge_guarded", {"amount": 100}))
    second = await dedup.idempotent_call_tool(tool_call("charge_guarded", {"amount": 100}))

    assert len(handled) == 2 and handled[0] is first and handled[1] is second
    assert dedup.ledger == {"balance": 200, "charges": 2}
    assert stored_keys(dedup) == []


# ----------------------------------------------------------------------------
# P10: on stdio each client spawns its own server, and the store is that client's alone
# ----------------------------------------------------------------------------


@pytest.mark.targets("1x-stdio")
def test_each_client_process_keeps_its_own_store(spawn):
    alice, bob = spawn(), spawn()

    assert text_of(alice.charge(100, key="shared-looking-key")) == "Charged 100. New balance: 100"
    # The same key from another client is another client's key: it runs, on that client's ledger.
    assert text_of(bob.charge(250, key="shared-looking-key")) == "Charged 250. New balance: 250"
    assert alice.ledger() == {"balance": 100, "charges": 1}
    assert bob.ledger() == {"balance": 250, "charges": 1}
