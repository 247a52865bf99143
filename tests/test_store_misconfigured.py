"""A store misconfigured fails at start, in one line that names the fix, on every store.

A lease too short to renew, a tools' table statement that fails now or would on the next start (no
IF NOT EXISTS), a SQLite file in a folder that is not there, a PostgreSQL that does not answer or holds
no such database: each is refused as the store opens (or as Limits is built), and a server on the
library logs the line before it stops.
"""

import subprocess
from pathlib import Path

import pytest
from conftest import fresh_store
from wire import sdk2_python

from mcp_idempotency.stores import Limits, Misconfigured, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

SERVER = Path(__file__).resolve().parent / "unit_of_work_server.py"
SHOP = Path(__file__).resolve().parent.parent / "idempotency" / "examples" / "shop.py"
NOT_AGAIN = "CREATE TABLE notes (text TEXT NOT NULL)"  # fine on an empty store, fatal on the next start


def test_a_lease_too_short_to_renew_is_refused_where_the_limits_are_built():
    with pytest.raises(ValueError) as refused:
        Limits(lease=0.001)
    assert str(refused.value) == (
        "Limits(lease=0.001): a lease must be 1 s or more: a shorter one passes before its renewal lands"
    )
    assert Limits(lease=1).lease == 1  # the floor itself is a lease


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
async def test_a_table_statement_that_would_fail_on_the_next_start_is_refused_on_the_first(kind, tmp_path):
    with fresh_store(kind, tmp_path, "store") as url:
        with pytest.raises(Misconfigured) as refused:
            async with open_store(url, Limits(), tables=[NOT_AGAIN]):
                pass
        line = str(refused.value)
        assert line.startswith("the tools' table statement 1 would fail on the next start (")
        assert line.endswith(
            "): let it allow for what it made before (CREATE TABLE IF NOT EXISTS, INSERT ... WHERE NOT EXISTS)"
        )
        again = [NOT_AGAIN.replace("TABLE", "TABLE IF NOT EXISTS")]
        async with open_store(url, Limits(), tables=again) as store, store.transaction() as tx:
            assert await tx.fetchall("SELECT text FROM notes") == []  # the refused start kept nothing; this one made it


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
async def test_a_table_statement_that_fails_is_refused_in_one_line_naming_it(kind, tmp_path):
    with fresh_store(kind, tmp_path, "store") as url:
        with pytest.raises(Misconfigured) as refused:
            async with open_store(url, Limits(), tables=["CREATE TABLE IF NOT EXISTS a (x INT)", "CREAT TABLE b"]):
                pass
        assert str(refused.value).startswith("the tools' table statement 2 failed (")
        assert str(refused.value).endswith("): correct it") and "\n" not in str(refused.value)


async def test_a_sqlite_file_in_a_folder_that_is_not_there_is_refused_naming_the_folder(tmp_path):
    with pytest.raises(Misconfigured) as refused:
        async with open_store(f"sqlite:{tmp_path}/missing/store.db", Limits()):
            pass
    assert str(refused.value) == (
        f"there is no folder {tmp_path}/missing for the SQLite file: create it, or point the store elsewhere"
    )
    assert not (tmp_path / "missing").exists()


async def test_a_postgresql_database_that_does_not_exist_is_refused_saying_to_create_it(postgres_url):
    url = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(Misconfigured) as refused:
        async with open_store(url, Limits()):
            pass
    assert (
        str(refused.value)
        == 'database "no_such_database" does not exist: create it (createdb), or name another in the URL'
    )


async def test_a_postgresql_that_does_not_answer_is_refused_naming_where_it_was_looked_for():
    with pytest.raises(Misconfigured) as refused:
        async with open_store("postgresql://postgres:secret@127.0.0.1:1/db", Limits()):
            pass
    line = str(refused.value)
    assert line.startswith("no PostgreSQL answers at 127.0.0.1:1 (") and line.endswith(
        "): start it, or name another host"
    )


def test_a_server_on_the_library_logs_the_one_line_before_it_stops(tmp_path):
    url = f"sqlite:{tmp_path}/missing/store.db"
    refused = subprocess.run(
        [sdk2_python(), str(SERVER), "--store", url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.splitlines()[0] == (
        f"idempotency: cannot open the store {url}: "
        f"there is no folder {tmp_path}/missing for the SQLite file: create it, or point the store elsewhere"
    )


def test_a_server_that_checks_before_serving_ends_in_the_one_line_alone(tmp_path):
    """keys.check() in the server's main, as the package README shows (examples/shop.py): the one line, and
    no traceback of the SDK's after it."""
    url = f"sqlite:{tmp_path}/missing/store.db"
    refused = subprocess.run(
        [sdk2_python(), str(SHOP), "--store", url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"cannot open the store {url}: "
        f"there is no folder {tmp_path}/missing for the SQLite file: create it, or point the store elsewhere"
    ]
