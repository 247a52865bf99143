"""Races held open on purpose: for each lock and ordering the stores and Tasks rely on, one side is held
(an uncommitted transaction on a connection or in a process of the test's own, a keyed call paused before
its commit) while the other side is shown to wait, or to be answered, and then to go on once the hold ends.

Nothing here is left to the scheduler. A side that must wait is seen waiting: on PostgreSQL the server
itself lists it among the sessions waiting for a lock (pg_locks), and the test goes on only once it is
there; on SQLite, whose waits no catalogue lists, it has not answered while the hold lasts. A side that
must not wait answers while the other still waits.
"""

import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from stores import read_store
from test_tasks import DECLARED, finished, task_call, task_request
from wire import new_key, start

from mcp_idempotency.stores import Held, Limits, StoreUnavailable, Won, postgres, sqlite

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

FAULTS = Path(__file__).resolve().parent / "faults"  # sitecustomize.py: hold a keyed call at a phase
FINGERPRINT = b"the request"
ALICE, BOB = '["alice"]', '["bob"]'  # principals as the layer names them (rules.principal_name)
LIMITS = Limits(retention=60, lease=30, max_records=100)  # a wait (P23) of 10 s: longer than any hold here
SEEN = 10  # seconds within which a side that must wait shows up waiting, on a slow machine

# The sessions on this database waiting for a lock of one kind that they have not been granted.
WAITING = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.datname = current_database() AND l.locktype = $1
"""


async def waiting(watcher, locktype: str, count: int) -> None:
    """Return once `count` sessions wait for a lock of `locktype`, as the server says; fail after SEEN s."""
    deadline = anyio.current_time() + SEEN
    while await watcher.fetchval(WAITING, locktype) < count:
        assert anyio.current_time() < deadline, f"{count} sessions never waited on a lock of kind {locktype}"
        await anyio.sleep(0.02)


class Answers(dict):
    """What each claim answered, or raised, by its key, as it answers; and how long it took."""

    def __init__(self):
        super().__init__()
        self.took: dict[str, float] = {}

    async def claim(self, store, key: str, principal: str = ALICE) -> None:
        """Claim `key` for `principal` on `store`, noting the answer and the time it took."""
        began = anyio.current_time()
        try:
            self[key] = await store.claim(key, FINGERPRINT, principal)
        except StoreUnavailable as error:  # the store failing is an answer too, asserted on like any other
            self[key] = error
        self.took[key] = anyio.current_time() - began


# ----------------------------------------------------------------------------
# PostgreSQL: the principal's share, the frozen row, a tool's lock, the schema's lock
# ----------------------------------------------------------------------------


async def test_claims_of_one_principal_take_turns_for_its_share_and_no_other_principal_waits(postgres_url):
    """P9': two claims of one principal with room for one never both see the room: they take turns on
    the principal's lock (stores/postgres_v4_claim.sql). Held from outside, both wait while another
    principal's claim is answered; released, one of the two wins and the other hears full."""
    import asyncpg

    limits = Limits(retention=60, lease=30, max_records=100, max_records_per_principal=1)
    store = await postgres.PostgresStore.open(postgres_url, limits)
    holder, watcher = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    answers = Answers()
    try:
        async with anyio.create_task_group() as claims, holder.transaction():
            # Alice's share's lock, as her claims take it: advisory, on her name, to the end of the transaction.
            await holder.execute("SELECT pg_advisory_xact_lock(3182, hashtext($1))", ALICE)
            claims.start_soon(answers.claim, store, "alice's first")
            claims.start_soon(answers.claim, store, "alice's second")
            await waiting(watcher, "advisory", 2)
            await answers.claim(store, "bob's", BOB)
            assert list(answers) == ["bob's"], f"bob's claim waited, or one of alice's did not: {answers}"
        assert isinstance(answers.pop("bob's"), Won)
        assert sorted(type(answer).__name__ for answer in answers.values()) == ["Full", "Won"], answers
    finally:
        await holder.close()
        await watcher.close()
        await store.close()


@pytest.mark.slow
@pytest.mark.serial  # it measures a wait, which four workers on two cores stretch past its bound
async def test_a_claim_on_a_frozen_key_answers_in_progress_after_its_wait_and_holds_up_no_other_key(postgres_url):
    """P23, issue 16 finding 2: an instance frozen between its completion and its COMMIT holds its key's
    row; a retry's takeover waits on it for the store's wait at most, then answers in progress (it waited
    forever once, holding the count row). Meanwhile a new key is claimed at once, the same principal's as
    well as another's: the waiting claim locks the key's row before its principal's, so holds no lock that
    they need (it once held the principal's, and the same principal's new key waited as long and lost the
    race against its own wait in one CI run)."""
    import asyncpg

    limits = Limits(retention=60, lease=6, max_records=100)  # a wait of 2 s
    store = await postgres.PostgresStore.open(postgres_url, limits)
    frozen, watcher = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    answers = Answers()
    try:
        await store.claim("k", FINGERPRINT, ALICE)
        # Its lease has passed, on the database's clock: a retry may take the key over, and so tries to.
        await frozen.execute("UPDATE idempotency_records SET deadline = clock_timestamp() - interval '1 second'")
        await frozen.execute("BEGIN")
        await frozen.execute("UPDATE idempotency_records SET owner = owner WHERE key = 'k'")  # then no COMMIT
        with anyio.fail_after(limits.wait + SEEN):
            async with anyio.create_task_group() as claims:
                claims.start_soon(answers.claim, store, "k")
                await waiting(watcher, "transactionid", 1)  # on the frozen row
                await answers.claim(store, "alice's other key")
                await answers.claim(store, "bob's key", BOB)
                assert "k" not in answers, f"a new key's claim waited behind the frozen key: {answers}"
    finally:
        await frozen.execute("ROLLBACK")
        await frozen.close()
        await watcher.close()
        await store.close()
    assert isinstance(answers["bob's key"], Won) and isinstance(answers["alice's other key"], Won), answers
    assert answers["k"] == Held(FINGERPRINT, None), answers  # in progress
    assert limits.wait * 0.9 < answers.took["k"] < limits.wait + SEEN, answers.took


async def test_a_tools_lock_holds_up_that_name_only_and_only_until_its_unit_of_work_ends(postgres_url):
    """P17: Transaction.lock(name) is held to the end of the unit of work, for that name alone: what a tool
    relies on to read and write one account in turn (and a task's work, to wait for its creation)."""
    import asyncpg

    store = await postgres.PostgresStore.open(postgres_url, LIMITS)
    watcher = await asyncpg.connect(postgres_url)
    held, release = anyio.Event(), anyio.Event()
    locked: list[str] = []

    async def hold(name: str) -> None:
        async with store.transaction() as tx:
            await tx.lock(name)
            held.set()
            await release.wait()

    async def lock(name: str) -> None:
        async with store.transaction() as tx:
            await tx.lock(name)
            locked.append(name)

    try:
        async with anyio.create_task_group() as units:  # each a unit of work of its own: none started inside another
            units.start_soon(hold, "account 1")
            await held.wait()
            units.start_soon(lock, "account 1")
            await waiting(watcher, "advisory", 1)
            await lock("account 2")
            assert locked == ["account 2"], locked
            release.set()
        assert locked == ["account 2", "account 1"]
    finally:
        await watcher.close()
        await store.close()


async def test_instances_opening_one_empty_database_take_turns_to_make_its_tables(postgres_url):
    """P15: instances started together on an empty database make its tables once: each takes the schema's
    lock first. One holds it, its tables made and not yet committed; another opening waits, then finds them."""
    import asyncpg

    maker, watcher = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    opened = []

    async def open_store() -> None:
        opened.append(await postgres.PostgresStore.open(postgres_url, LIMITS))

    try:
        async with anyio.create_task_group() as opening, maker.transaction():
            await maker.execute("SELECT pg_advisory_xact_lock(3182)")  # the schema's lock, as open takes it
            await maker.execute(postgres.SCHEMA)
            opening.start_soon(open_store)
            await waiting(watcher, "advisory", 1)
            assert opened == []
        [store] = opened
        assert isinstance(await store.claim("k", FINGERPRINT, ALICE), Won)
        await store.close()
    finally:
        await maker.close()
        await watcher.close()


# ----------------------------------------------------------------------------
# SQLite: one writer at a time, across processes
# ----------------------------------------------------------------------------

# Another process on the same file, in a write transaction until told to end it.
WRITER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("writing", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


async def test_a_claim_waits_aside_while_another_process_writes_the_sqlite_file_then_wins(tmp_path):
    """P16, P23: SQLite lets one writer in at a time. While another process writes, a claim of a new key
    waits for it in a worker thread (the event loop runs on), for the store's wait at most; then wins."""
    path = str(tmp_path / "store.db")
    store = sqlite.SQLiteStore(path, LIMITS)
    other = subprocess.Popen([sys.executable, "-c", WRITER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    answers = Answers()
    try:
        assert await anyio.to_thread.run_sync(other.stdout.readline) == b"writing\n"
        async with anyio.create_task_group() as claims:
            claims.start_soon(answers.claim, store, "k")
            began = anyio.current_time()
            await anyio.sleep(1)  # the hold: long beside a claim (milliseconds), short beside the wait (10 s)
            assert anyio.current_time() - began < 2, "the waiting claim held up the event loop"
            assert answers == {}, f"a claim answered while another process held the file: {answers}"
            other.communicate(b"\n", timeout=SEEN)
        assert isinstance(answers["k"], Won), answers
    finally:
        other.kill()
        other.wait()
        await store.close()


# ----------------------------------------------------------------------------
# Tasks: the task's creation commits before its work reads it; a cancel and a finish, the first wins
# ----------------------------------------------------------------------------


async def test_a_tasks_work_waits_for_its_creation_to_commit_then_runs(postgres_url, monkeypatch):
    """P24, SEP-2663: under a key a task is created in the layer's unit of work, which commits only once
    the CreateTaskResult is recorded; its work starts at once, on another connection, so it must wait for
    that commit (the task's lock) or it finds no task and never runs. The call is held before its commit
    (tests/faults, after-tool) while the work is seen waiting and the task is in no committed row.
    PostgreSQL alone: SQLite's and memory's units of work of one process take turns anyway."""
    import asyncpg

    monkeypatch.setenv("PYTHONPATH", str(FAULTS))
    monkeypatch.setenv("SEP3182_PAUSE_AT", "after-tool")
    monkeypatch.setenv("SEP3182_PAUSE_SECONDS", "2")
    wire = await anyio.to_thread.run_sync(lambda: start("2x-http", "--tasks", "--store", postgres_url))
    watcher = await asyncpg.connect(postgres_url)
    try:
        call = wire.send_call("charge_guarded", {"amount": 100}, new_key(), _meta=DECLARED)
        await anyio.to_thread.run_sync(wire.wait_for_log, "faults: paused at after-tool")
        await waiting(watcher, "advisory", 1)  # the work, on its task's lock
        assert await watcher.fetchval("SELECT count(*) FROM tasks") == 0  # the creation is not committed
        handle = (await anyio.to_thread.run_sync(wire.reply, call))["result"]
        task = await anyio.to_thread.run_sync(finished, wire, handle["taskId"])
        assert task["status"] == "completed", task
    finally:
        await watcher.close()
        await anyio.to_thread.run_sync(wire.close)


def work_ended(wire, task_id: str) -> str:
    """How the task's work ended, as the server logs it (once the pause is over): finished, or undone."""
    ended = re.compile(f"task {task_id}: (completed|failed|cancelled, its charge rolled back)")
    deadline = time.monotonic() + SEEN
    while (found := ended.search(wire.log())) is None:
        assert time.monotonic() < deadline, f"the work of task {task_id} never ended:\n{wire.log()}"
        time.sleep(0.05)
    return found.group(1)


def test_a_cancel_while_a_tasks_charge_is_uncommitted_wins_and_the_charge_rolls_back(postgres_url, monkeypatch):
    """P24, SEP-2663: the first of a task's finish and a cancel wins. The task's work is held between its
    charge and its commit (tests/faults, after-charge); a cancel meanwhile takes effect at once, and the
    work, finding its task no longer working, rolls its charge back."""
    monkeypatch.setenv("PYTHONPATH", str(FAULTS))
    monkeypatch.setenv("SEP3182_PAUSE_AT", "after-charge")
    monkeypatch.setenv("SEP3182_PAUSE_SECONDS", "2")
    wire = start("2x-http", "--tasks", "--store", postgres_url)
    try:
        task_id = task_call(wire, 100, new_key())["result"]["taskId"]
        wire.wait_for_log("faults: paused at after-charge")
        assert task_request(wire, "tasks/cancel", task_id)["result"]["resultType"] == "complete"
        assert f"task {task_id}: cancel took effect" in wire.log()  # before the work's finish, which is held
        assert work_ended(wire, task_id) == "cancelled, its charge rolled back"
        assert finished(wire, task_id)["status"] == "cancelled"
        assert read_store(postgres_url)[0] == {"balance": 0, "charges": 0}
    finally:
        wire.close()
