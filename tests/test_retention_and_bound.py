"""P8 (records live for a bounded window) and P9 (the store holds a bounded number of them).

The end-to-end tests run on every target with a short window or a small bound.
The others run server.py in this process and move its fake clock instead of
sleeping; tests/test_store.py does the same for the 2.x server's stores.
"""

import time

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import McpError

from client_demo import call_tool, text
from conftest import in_process_session, stored_keys
from wire import IN_PROGRESS, REPLY_TIMEOUT, STORE_FULL, text_of

HOLD = 0.5  # seconds a charge takes while a test needs one in flight


async def charge_with_key(session, key: str, amount: int = 100) -> str:
    """charge_guarded with `key` beside the arguments, sent as the demo client sends it; the text it answers."""
    # The demo's half-second timeout is for its lost responses; a call held in flight here takes as long.
    return text(await call_tool(session, "charge_guarded", {"amount": amount}, key, timeout=REPLY_TIMEOUT))


async def rejection_of(session, key: str) -> str:
    """The error.data.type of a keyed charge that must be rejected."""
    # Not pytest.raises: its failure, raised inside the session's task groups,
    # made pytest 9 on CPython 3.11.7 crash while rendering the report
    # ("SystemError: AST constructor recursion depth mismatch") and stop the run.
    try:
        answer = await charge_with_key(session, key)
    except McpError as rejected:
        return rejected.error.data["type"]
    raise AssertionError(f"{key!r} was not rejected: {answer}")


async def claimed(server, key: str) -> None:
    """Wait until a call started in another task has claimed `key` and is charging."""
    with anyio.fail_after(5):
        while key not in stored_keys(server):
            await anyio.sleep(0.01)
    # Every other task now waits on something: the call is asleep in its charge delay.
    await anyio.wait_all_tasks_blocked()


# P8: the retention window, on the fake clock


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_key_within_the_window_replays(dedup):
    async with in_process_session(dedup) as session:
        assert await charge_with_key(session, "order-1") == "Charged 100. New balance: 100"
        dedup.clock.advance(dedup.retention - 1)
        assert await charge_with_key(session, "order-1") == "Charged 100. New balance: 100"
    assert dedup.ledger == {"balance": 100, "charges": 1}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_key_past_the_window_executes_anew(dedup):
    async with in_process_session(dedup) as session:
        assert await charge_with_key(session, "order-1") == "Charged 100. New balance: 100"
        dedup.clock.advance(dedup.retention + 1)
        assert await charge_with_key(session, "order-1") == "Charged 100. New balance: 200"
    assert dedup.ledger == {"balance": 200, "charges": 2}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_expired_record_is_dropped_on_the_next_keyed_call(dedup):
    async with in_process_session(dedup) as session:
        await charge_with_key(session, "order-1")
        dedup.clock.advance(dedup.retention + 1)
        await charge_with_key(session, "order-2")
    assert stored_keys(dedup) == ["order-2"]


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_store_keeps_only_the_records_inside_the_window(dedup):
    """Memory follows the window, not the uptime: the old half goes, the young half stays."""
    old = [f"old-{n}" for n in range(10)]
    young = [f"young-{n}" for n in range(10)]
    async with in_process_session(dedup) as session:
        for key in old:
            await charge_with_key(session, key)
        dedup.clock.advance(dedup.retention / 2)
        for key in young:
            await charge_with_key(session, key)
        dedup.clock.advance(dedup.retention / 2 + 1)  # past the old records' window only
        await charge_with_key(session, "latest")
    assert stored_keys(dedup) == [*young, "latest"]


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_running_record_never_expires(dedup, monkeypatch):
    """A call still charging when its window would have passed keeps its key: the duplicate is in progress."""
    monkeypatch.setattr(dedup, "charge_delay", HOLD)
    async with in_process_session(dedup) as session, anyio.create_task_group() as calls:
        calls.start_soon(charge_with_key, session, "order-1")
        await claimed(dedup, "order-1")
        dedup.clock.advance(dedup.retention + 1)
        assert await rejection_of(session, "order-1") == IN_PROGRESS
    assert dedup.ledger == {"balance": 100, "charges": 1}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_expired_records_behind_a_running_one_are_still_dropped(dedup, monkeypatch):
    """A running record at the front of the store does not shield the expired ones after it."""
    monkeypatch.setattr(dedup, "charge_delay", HOLD)
    async with in_process_session(dedup) as session, anyio.create_task_group() as calls:
        calls.start_soon(charge_with_key, session, "running")
        await claimed(dedup, "running")
        monkeypatch.setattr(dedup, "charge_delay", 0)  # only the running call stays slow
        await charge_with_key(session, "expired")
        dedup.clock.advance(dedup.retention + 1)
        await charge_with_key(session, "latest")
        assert stored_keys(dedup) == ["running", "latest"]


def test_key_reused_after_the_window_executes_anew_end_to_end(spawn):
    """--retention reaches the server: a key is new again once its window has passed."""
    wire = spawn("--retention", "0.5")
    assert text_of(wire.charge(100, key="order-1")) == "Charged 100. New balance: 100"
    time.sleep(1)  # a subprocess runs on the real clock; the only sleep in these tests
    assert text_of(wire.charge(100, key="order-1")) == "Charged 100. New balance: 200"
    assert wire.ledger() == {"balance": 200, "charges": 2}


# P9: the bound on the store


@pytest.fixture
def full_server(spawn):
    """A server that holds at most three records, holding three."""
    wire = spawn("--max-records", "3")
    for key in ("order-1", "order-2", "order-3"):
        assert "result" in wire.charge(100, key=key)
    assert wire.ledger() == {"balance": 300, "charges": 3}
    return wire


def test_new_key_is_refused_when_the_store_is_full(full_server):
    refused = full_server.charge(100, key="order-4")
    assert refused["error"]["code"] == types.INVALID_PARAMS
    assert refused["error"]["data"] == {"type": STORE_FULL, "idempotencyKey": "order-4"}
    assert full_server.ledger() == {"balance": 300, "charges": 3}  # refused before anything ran


def test_replay_of_a_stored_key_works_while_full(full_server):
    assert text_of(full_server.charge(100, key="order-1")) == "Charged 100. New balance: 100"
    assert full_server.ledger() == {"balance": 300, "charges": 3}


def test_call_without_a_key_works_while_full(full_server):
    assert text_of(full_server.charge(100, tool="charge_unguarded")) == "Charged 100. New balance: 400"
    assert full_server.ledger() == {"balance": 400, "charges": 4}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_capacity_comes_back_as_records_expire(dedup, monkeypatch):
    monkeypatch.setattr(dedup, "max_records", 3)
    async with in_process_session(dedup) as session:
        for key in ("order-1", "order-2", "order-3"):
            await charge_with_key(session, key)
        assert await rejection_of(session, "order-4") == STORE_FULL
        dedup.clock.advance(dedup.retention + 1)
        assert await charge_with_key(session, "order-4") == "Charged 100. New balance: 400"
    assert dedup.ledger == {"balance": 400, "charges": 4}
