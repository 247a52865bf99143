"""More races held open on purpose, in the stores, beside tests/test_races.py (whose helpers it uses): a
retry told in progress from a read, with no lock, however long the key's holder or another process's
writer keeps its own; a full store's purge passing over a row that a frozen transaction holds; and a
claim waiting its turn behind a unit of work of its own process on SQLite.

Where a side must not wait, the hold lasts until it has answered, and on PostgreSQL the server is asked,
while it has not, whether it waits for a row (pg_locks): a side that waited is seen waiting, never timed.
"""

import subprocess
import sys

import anyio
import pytest
from test_races import ALICE, BOB, FINGERPRINT, LIMITS, WAITING, WRITER, Answers

from mcp_idempotency.stores import Held, Limits, Won, postgres, sqlite

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

IN_PROGRESS = Held(FINGERPRINT, None)  # what a store answers for a key held by a running claim
# Every record completed, its window passed on the database's clock: each may be purged.
EXPIRED = """
UPDATE idempotency_records SET status = 'completed', outcome = '{"result": {}}', owner = NULL,
                               deadline = clock_timestamp() - interval '1 second'
"""


async def test_a_retry_meeting_its_keys_completion_uncommitted_is_told_in_progress_without_waiting(postgres_url):
    """P4.3, S1 on PostgreSQL: within its lease a claim reads the record that holds its key and answers with
    no lock, so a retry meeting its original between the completion and the COMMIT (the key's row locked)
    is told in progress while the row is still locked. Only a passed lease makes a claim wait for the row
    (tests/test_races.py, the frozen key)."""
    import asyncpg

    store = await postgres.PostgresStore.open(postgres_url, LIMITS)
    original, watcher = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    answers = Answers()
    try:
        await store.claim("k", FINGERPRINT, ALICE)
        async with anyio.create_task_group() as claims, original.transaction():
            assert await original.execute(postgres.COMPLETE, "k", FINGERPRINT, '{"result": {}}', 60) == "UPDATE 1"
            claims.start_soon(answers.claim, store, "k")
            while "k" not in answers:  # answered while the completion is held, never seen waiting for its row
                assert await watcher.fetchval(WAITING, "transactionid") == 0, "the retry waited on the key's row"
                await anyio.sleep(0.02)
        assert answers["k"] == IN_PROGRESS, answers
    finally:
        await original.close()
        await watcher.close()
        await store.close()


async def test_a_retry_of_a_held_key_while_another_process_writes_the_sqlite_file_is_told_at_once(tmp_path):
    """P4.3, S1 on SQLite: another process holds the file's one write lock, which a claim of a new key
    waits for (tests/test_races.py); a retry of a key already held needs no write: WAL lets it read
    beside the writer, and it is told in progress while the writer still writes."""
    path = str(tmp_path / "store.db")
    store = sqlite.SQLiteStore(path, LIMITS)
    await store.claim("k", FINGERPRINT, ALICE)
    other = subprocess.Popen([sys.executable, "-c", WRITER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    answers = Answers()
    try:
        assert await anyio.to_thread.run_sync(other.stdout.readline) == b"writing\n"
        await answers.claim(store, "k")
        assert answers["k"] == IN_PROGRESS, answers
    finally:
        other.kill()
        other.wait()
        await store.close()


async def test_a_full_stores_purge_passes_over_a_locked_record_and_the_claim_is_answered_at_once(postgres_url):
    """P9, P23 on PostgreSQL: a claim that finds the store full purges the records past their window, but
    only those no transaction holds (SKIP LOCKED): one frozen mid-takeover of an expired key holds that
    row, and the claim, purging the other, wins while the row is still held, never waiting for it."""
    import asyncpg

    store = await postgres.PostgresStore.open(postgres_url, Limits(retention=60, lease=30, max_records=2))
    frozen, watcher = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    answers = Answers()
    try:
        for key in ("locked", "free"):
            await store.claim(key, FINGERPRINT, ALICE)
        await watcher.execute(EXPIRED)  # the store is full, of records past their window
        async with anyio.create_task_group() as claims, frozen.transaction():
            await frozen.execute("UPDATE idempotency_records SET owner = owner WHERE key = 'locked'")
            claims.start_soon(answers.claim, store, "new", BOB)
            while "new" not in answers:  # answered while the row is held, never seen waiting for it
                assert await watcher.fetchval(WAITING, "transactionid") == 0, "the purge waited on a locked row"
                await anyio.sleep(0.02)
        assert isinstance(answers["new"], Won), answers
        assert await watcher.fetchval("SELECT array_agg(key ORDER BY key) FROM idempotency_records") == [
            "locked",
            "new",
        ]
    finally:
        await frozen.close()
        await watcher.close()
        await store.close()


async def test_a_claim_waits_its_turn_behind_a_unit_of_work_of_its_own_process_on_sqlite_then_wins(tmp_path):
    """P16, P17 on SQLite: a process's units of work share one writing connection, one at a time (its turn,
    held from the first statement to the end). A claim of a new key meanwhile cannot write on the loop;
    it waits for the turn aside, the event loop running on, and never inside that unit of work's
    transaction: it wins once the unit of work commits, which keeps its own write."""
    store = sqlite.SQLiteStore(
        str(tmp_path / "store.db"), LIMITS, tables=["CREATE TABLE IF NOT EXISTS notes (note text)"]
    )
    held, release = anyio.Event(), anyio.Event()
    answers = Answers()

    async def unit_of_work() -> None:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO notes VALUES ($1)", "written in the unit of work")
            held.set()
            await release.wait()

    try:
        async with anyio.create_task_group() as units:
            units.start_soon(unit_of_work)
            await held.wait()
            units.start_soon(answers.claim, store, "k", ALICE)
            began = anyio.current_time()
            await anyio.sleep(1)  # the hold: long beside a claim (milliseconds), short beside the wait (10 s)
            assert anyio.current_time() - began < 2, "the waiting claim held up the event loop"
            assert answers == {}, f"a claim answered while a unit of work of its process held the file: {answers}"
            release.set()
        assert isinstance(answers["k"], Won), answers
        async with store.transaction() as tx:
            assert await tx.fetchall("SELECT note FROM notes") == [("written in the unit of work",)]
    finally:
        await store.close()
