"""A tool's own tables and statements, one SQL text on every store: declared to open_store, written and
read through the unit of work (execute, fetchone, fetchall with $1, $2... for arguments).

Each store is opened in this process as the layer opens it; the start of several instances at once
runs in processes of their own, against one empty PostgreSQL database.
"""

import subprocess
import sys
import textwrap

import anyio
import asyncpg
import pytest
from conftest import fresh_store

from mcp_idempotency.stores import Limits, Row, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

STORES = ["memory", "sqlite", "postgresql"]

# A tool's table, written once for every store.
NOTES = "CREATE TABLE IF NOT EXISTS notes (id integer PRIMARY KEY, body text NOT NULL)"
ADD = "INSERT INTO notes VALUES ($1, $2)"
ALL = "SELECT id, body FROM notes ORDER BY id"


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    """memory, sqlite or postgresql."""
    return request.param


@pytest.fixture
def url(store_kind, tmp_path):
    """A new, empty store of `store_kind`: its URL."""
    with fresh_store(store_kind, tmp_path, "notes") as url:
        yield url


async def written_and_read(url: str) -> tuple[list[int], Row | None, Row | None, list[Row]]:
    """Two notes added and one changed in a unit of work; then what another unit of work reads."""
    async with open_store(url, Limits(), tables=[NOTES]) as store:
        async with store.transaction() as tx:
            added = [await tx.execute(ADD, 1, "one"), await tx.execute(ADD, 2, "two")]
            added.append(await tx.execute("UPDATE notes SET body = body || $1 WHERE id >= $2", "!", 1))
            # $2 before $1, and $1 twice: the arguments bind by number, not by order of appearance
            found = await tx.fetchone("SELECT id FROM notes WHERE body = $2 AND id = $1 AND id = $1", 2, "two!")
        async with store.transaction() as tx:
            missing = await tx.fetchone("SELECT id FROM notes WHERE id = $1", 3)
            return added, found, missing, await tx.fetchall(ALL)


async def test_a_tools_statements_run_unchanged_on_every_store(url):
    added, found, missing, rows = await written_and_read(url)
    assert added == [1, 1, 2]  # rows changed, as PostgreSQL counts them, on every store
    assert (found, missing) == ((2,), None)
    assert rows == [(1, "one!"), (2, "two!")]


async def test_a_nested_unit_of_work_that_fails_undoes_only_its_own_statements(url):
    async with open_store(url, Limits(), tables=[NOTES]) as store:
        async with store.transaction() as tx:
            await tx.execute(ADD, 1, "kept")
            with pytest.raises(ZeroDivisionError):
                async with store.transaction() as nested:
                    await nested.execute(ADD, 2, "undone")
                    1 / 0  # noqa: B018 (the tool fails after its write)
        async with store.transaction() as tx:
            assert await tx.fetchall(ALL) == [(1, "kept")]


async def test_units_of_work_that_overlap_take_turns_where_the_store_needs_and_both_commit(url):
    """The second writes while the first, which wrote already, is still open (memory and SQLite let one
    writer in at a time, so there it waits its turn): neither write is lost, and nothing is left waiting."""
    async with open_store(url, Limits(), tables=[NOTES]) as store:
        first_wrote = anyio.Event()

        async def first() -> None:
            async with store.transaction() as tx:
                await tx.execute(ADD, 1, "first")
                first_wrote.set()
                await anyio.sleep(0.2)  # still open while the second writes

        async def second() -> None:
            await first_wrote.wait()
            async with store.transaction() as tx:
                await tx.execute(ADD, 2, "second")

        with anyio.fail_after(10):  # a unit of work left holding the store's turn would hang: fail instead
            async with anyio.create_task_group() as units:
                units.start_soon(first)
                units.start_soon(second)
        async with store.transaction() as tx:
            assert await tx.fetchall(ALL) == [(1, "first"), (2, "second")]


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"])
async def test_a_tools_table_made_as_the_store_opens_keeps_its_rows_when_it_opens_again(url):
    async with open_store(url, Limits(), tables=[NOTES]) as store, store.transaction() as tx:
        await tx.execute(ADD, 1, "before the restart")
    async with open_store(url, Limits(), tables=[NOTES]) as store, store.transaction() as tx:
        assert await tx.fetchall(ALL) == [(1, "before the restart")]


INSTANCES = 8  # started together: enough that two collide on the table when nothing makes them take turns

INSTANCE = """
import anyio
from mcp_idempotency.stores import Limits, open_store

async def start() -> None:
    async with open_store({url!r}, Limits(), tables=[{table!r}]) as store, store.transaction() as tx:
        print(await tx.fetchone("SELECT count(*) FROM notes"))

anyio.run(start)
"""


async def test_instances_starting_together_on_an_empty_postgresql_database_each_make_a_tools_table(
    postgres_url,
):
    """Every instance waits on the store's schema lock, then all run at once: each starts, and the
    tool's CREATE TABLE runs under the lock (outside it, two of them collide on the table's type)."""
    holder = await asyncpg.connect(postgres_url)
    await holder.execute("SELECT pg_advisory_lock(3182)")  # the store's schema lock: every instance waits on it
    script = textwrap.dedent(INSTANCE).format(url=postgres_url, table=NOTES)
    instances = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(INSTANCES)
    ]
    try:
        await anyio.sleep(2)  # every instance is waiting on the lock by now
        assert [instance.poll() for instance in instances] == [None] * INSTANCES, "an instance did not wait its turn"
        await holder.execute("SELECT pg_advisory_unlock(3182)")
        ended = [instance.communicate(timeout=60) for instance in instances]
    finally:
        await holder.close()
        for instance in instances:
            instance.kill()
    assert [instance.returncode for instance in instances] == [0] * INSTANCES, [err for _, err in ended]
    assert [out for out, _ in ended] == ["(0,)\n"] * INSTANCES
