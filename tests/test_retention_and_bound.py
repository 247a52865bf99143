"""P8 (records live for a bounded window), P8' (a running record holds its key for a bounded
lease) and P9 (the store holds a bounded number of them).

The end-to-end rows on every target (a one-second window, a bound of three) are the
conformance kit's, run by test_kit.py::test_kit_retention_and_bound_rows_pass_on_every_target:
one body of checks. The tests here run server.py in this process and move its fake
clock instead of sleeping; tests/test_store.py does the same for the 2.x server's stores.
"""

import time

import anyio
import pytest
from conftest import in_process_session, stored_keys
from mcp.shared.exceptions import McpError
from wire import CONFLICT, IN_PROGRESS, REPLY_TIMEOUT, STORE_FULL, error_type, text_of

from client_demo import call_tool, text

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
async def test_running_record_is_not_dropped_when_a_window_would_have_passed(dedup, monkeypatch):
    """A call still charging keeps its record: a window opens only at its completion (P8)."""
    monkeypatch.setattr(dedup, "charge_delay", HOLD)
    async with in_process_session(dedup) as session, anyio.create_task_group() as calls:
        calls.start_soon(charge_with_key, session, "order-1")
        await claimed(dedup, "order-1")
        dedup.clock.advance(dedup.retention + 1)
        assert await rejection_of(session, "order-1") == IN_PROGRESS
    assert dedup.ledger == {"balance": 100, "charges": 1}


SLOW, RETRY_EVERY = 3.0, 0.5  # P18': a charge slower than any lease a shared store would give it


@pytest.mark.targets("1x-stdio")
def test_a_slow_run_is_never_taken_over_and_every_retry_is_in_progress_at_once_until_the_replay(spawn):
    """P18': the run is this process's own, alive for as long as the process is: a retry, however late,
    is refused at once as in progress, other arguments are a conflict, and the charge is made once."""
    wire = spawn("--charge-delay", str(SLOW))
    original = wire.send_call("charge_guarded", {"amount": 100}, "order-1")
    wire.wait_for_log("claimed: key='order-1'")
    retries = 0
    while not wire.answered(original):
        began = time.monotonic()
        answer = wire.charge(100, key="order-1")
        if "result" in answer:  # sent as the original completed: its replay
            break
        assert error_type(answer) == IN_PROGRESS and time.monotonic() - began < RETRY_EVERY, answer
        retries += 1
        time.sleep(RETRY_EVERY)
    assert retries >= SLOW / RETRY_EVERY - 2  # retried all along the run, well past any lease
    assert error_type(wire.charge(200, key="order-1")) == CONFLICT
    assert text_of(wire.reply(original)) == "Charged 100. New balance: 100"
    assert text_of(wire.charge(100, key="order-1")) == "Charged 100. New balance: 100"  # the replay
    assert wire.log().count("claimed: key='order-1'") == 1
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.targets("1x-stdio")
def test_a_run_past_its_deadline_is_stopped_and_its_failure_is_what_the_key_replays(spawn):
    """P18': what bounds a hung tool in server.py is its deadline: the run is stopped, and that outcome is
    recorded, so the key never runs the tool a second time; its caller and every retry learn it failed."""
    wire = spawn("--deadline", "1", "--charge-delay", str(SLOW))
    original = wire.send_call("charge_guarded", {"amount": 100}, "order-1")
    wire.wait_for_log("claimed: key='order-1'")
    assert error_type(wire.charge(100, key="order-1")) == IN_PROGRESS  # within its deadline (S1)
    stopped = wire.reply(original)["error"]
    assert stopped["code"] == -32603 and "did not finish in 1 s and was stopped" in stopped["message"]
    assert wire.charge(100, key="order-1")["error"] == stopped  # replayed: the tool is not run again
    assert "deadline passed: key='order-1'" in wire.log()
    assert wire.log().count("claimed: key='order-1'") == 1
    assert wire.ledger() == {"balance": 0, "charges": 0}  # stopped before the charge was applied


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


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_a_key_claimed_first_and_completed_last_expires_last(dedup, monkeypatch):
    """Records expire in completion order, not claim order: A is claimed before B but completes after it,
    so once B's window has passed and A's has not, B runs anew and A still replays."""
    monkeypatch.setattr(dedup, "charge_delay", HOLD)
    async with in_process_session(dedup) as session:
        async with anyio.create_task_group() as calls:
            calls.start_soon(charge_with_key, session, "order-a")  # claimed first, slow
            await claimed(dedup, "order-a")
            monkeypatch.setattr(dedup, "charge_delay", 0)
            assert await charge_with_key(session, "order-b", 1) == "Charged 1. New balance: 1"  # completes first
            dedup.clock.advance(dedup.retention / 2)  # A completes half a window after B
        assert stored_keys(dedup) == ["order-b", "order-a"]
        dedup.clock.advance(dedup.retention / 2 + 1)  # past B's window, inside A's
        assert await charge_with_key(session, "order-b", 1) == "Charged 1. New balance: 102"  # B runs anew
        assert await charge_with_key(session, "order-a") == "Charged 100. New balance: 101"  # A replays
    assert dedup.ledger == {"balance": 102, "charges": 3}


# P9: the bound on the store


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
