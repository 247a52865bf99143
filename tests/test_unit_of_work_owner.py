"""The unit of work's policy, on every store, in process: whose it is, whose errors are whose, and what an ended
session says.

P28': a unit of work belongs to the task that opened it: a `tx` sent through from another task, or after its end,
is refused in one line, never a transaction begun that no one ends; spawned work that cannot have SQLite's writer
within the wait is told why. P23': the tool's own SQL errors propagate as they are and latch nothing; the store's
own failures are StoreUnavailable. PostgreSQL ending a session idle in its transaction is named, with the fix.
"""

import anyio
import pytest
from conftest import fresh_store

from mcp_idempotency.stores import Limits, StoreUnavailable, UnitOfWorkMisused, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

STORES = ["memory", "sqlite", "postgresql"]
NOTES = "CREATE TABLE IF NOT EXISTS notes (text TEXT PRIMARY KEY)"
TOOLS_OWN = ["SELEC 1", "SELECT * FROM no_such_table", "SELECT no_such_column FROM notes"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_tx_used_from_another_task_or_after_its_end_is_refused_and_the_store_stays_usable(kind, tmp_path):
    with fresh_store(kind, tmp_path, "store") as url:
        async with open_store(url, Limits(lease=3), tables=[NOTES]) as store:
            refusals = []

            async def elsewhere(tx) -> None:
                with pytest.raises(UnitOfWorkMisused) as refused:
                    await tx.execute("INSERT INTO notes VALUES ('from another task')")
                refusals.append(str(refused.value))

            async with store.transaction() as tx:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(elsewhere, tx)
                await tx.execute("INSERT INTO notes VALUES ('its own')")
            with pytest.raises(UnitOfWorkMisused) as after:
                await tx.execute("INSERT INTO notes VALUES ('after its end')")
            assert refusals == [
                "this unit of work belongs to the task that opened it: "
                "open one here, `async with keys.transaction() as tx`"
            ]
            assert str(after.value).startswith("this unit of work has ended: ")
            async with store.transaction() as tx:  # nothing left held
                assert await tx.fetchall("SELECT text FROM notes") == [("its own",)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_spawned_work_awaited_inside_the_calls_unit_of_work_is_told_the_writer_is_held_not_left_waiting(
    kind, tmp_path
):
    """One writer a process (memory, SQLite): work the tool awaits while its own unit of work holds it cannot have
    it; it is told why after the store's wait (a third of the lease), and the call's unit of work commits."""
    with fresh_store(kind, tmp_path, "store") as url:
        async with open_store(url, Limits(lease=1.5), tables=[NOTES]) as store:
            told = []

            async def spawned() -> None:
                with pytest.raises(StoreUnavailable) as refused:
                    async with store.transaction() as tx:
                        await tx.execute("INSERT INTO notes VALUES ('spawned')")
                told.append(str(refused.value))

            async with store.transaction() as tx:
                await tx.execute("INSERT INTO notes VALUES ('the call')")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(spawned)
            assert len(told) == 1 and "another unit of work" in told[0] and "first statement" in told[0], told
            async with store.transaction() as tx:
                assert await tx.fetchall("SELECT text FROM notes") == [("the call",)]


@pytest.mark.parametrize("kind", STORES)
async def test_the_tools_own_sql_errors_propagate_as_they_are_and_latch_nothing(kind, tmp_path):
    with fresh_store(kind, tmp_path, "store") as url:
        async with open_store(url, Limits(), tables=[NOTES]) as store:
            async with store.transaction() as tx:
                await tx.execute("INSERT INTO notes VALUES ('kept')")
                for statement in [*TOOLS_OWN, "INSERT INTO notes VALUES ('kept')"]:  # the last: a constraint
                    with pytest.raises(Exception) as raised:
                        async with store.transaction() as nested:  # a savepoint, as a tool's own block is
                            await nested.execute(statement)
                    assert not isinstance(raised.value, StoreUnavailable), (statement, raised.value)
                assert tx.failure is None
            assert tx.completed is False
            async with store.transaction() as tx:
                assert await tx.fetchall("SELECT text FROM notes") == [("kept",)]  # the unit of work committed


async def test_postgresql_ending_a_unit_of_work_left_idle_names_it_and_the_fix(postgres_url):
    """No claim renewed meanwhile (nothing keeps it awake): past a lease and the wait idle, the server ends it."""
    limits = Limits(lease=1)
    async with open_store(postgres_url, limits, tables=[NOTES]) as store:
        with pytest.raises(StoreUnavailable) as ended:
            async with store.transaction() as tx:
                await tx.execute("INSERT INTO notes VALUES ('before')")
                await anyio.sleep(limits.lease + limits.wait + 1)
                await tx.execute("INSERT INTO notes VALUES ('after')")
        line = str(ended.value)
        assert line.startswith("PostgreSQL: the unit of work sat idle in its transaction longer than ")
        assert line.endswith("do slow work (a payment, a mail) before the unit of work's first statement")
        async with store.transaction() as tx:
            assert await tx.fetchall("SELECT text FROM notes") == []


async def test_a_claim_for_another_key_waits_for_the_open_unit_of_work_only_never_for_those_queued_behind_it(tmp_path):
    """SQLite, one writer: a claim that cannot write on the loop waits aside for the file, ahead of this process's
    units of work queued for the writer, so it is answered as soon as the open one lets go (not after all three)."""
    async with open_store(f"sqlite:{tmp_path / 'store.db'}", Limits(lease=30), tables=[NOTES]) as store:
        order: list[str] = []
        holding, release = anyio.Event(), anyio.Event()

        async def unit_of_work(n: int) -> None:
            async with store.transaction() as tx:
                await tx.execute("INSERT INTO notes VALUES ($1)", f"unit {n}")
                holding.set()
                await release.wait()
            order.append(f"unit {n}")

        async def claim() -> None:
            order.append(type(await store.claim("an e-mail", b"request", '["alice"]')).__name__)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(unit_of_work, 0)
            await holding.wait()
            tasks.start_soon(unit_of_work, 1)
            tasks.start_soon(unit_of_work, 2)
            await anyio.sleep(0.1)  # both queued for the writer
            tasks.start_soon(claim)
            await anyio.sleep(0.3)  # the claim waits aside for the file
            assert order == []
            release.set()
        assert order[:2] == ["unit 0", "Won"] and sorted(order[2:]) == ["unit 1", "unit 2"], order
