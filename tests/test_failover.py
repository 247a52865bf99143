"""Store loss and failover: what a retry does when the records it relies on are gone.

A record is what turns a retry into a replay. When the store loses it, the retry
runs the tool again; what that costs depends on where the tool's effect lives:

- in the store, in the record's own transaction (the ledger's charge, P17): the charge
  is lost together with its record, so the retry's charge is the only one left;
- outside the store (the outbox's e-mail, counted in its process): the effect stays,
  and the retry's e-mail is a second one.

Quick: a store wiped between an attempt and its retry (SQLite, PostgreSQL).
Slow: a PostgreSQL primary with a streaming replica (tests/replica.sh), the primary
stopped abruptly under a bounded load, the replica promoted, every key retried on new
instances pointed at it; with asynchronous replication and with synchronous.

Ground truth is read with SQL from the store, in one helper (`ground_truth`), never
through the servers, and the stores are spoken to only through the servers.
"""

import contextlib
import json
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

from wire import ROOT, error_type, text_of

# ----------------------------------------------------------------------------
# Ground truth, read from the store's tables directly
# ----------------------------------------------------------------------------

# The tables read here: the layer's records and the demo's ledger. If either moves
# (a schema upgrade), this is the one place to change.
RECORDS = "SELECT key, outcome FROM idempotency_records"
LEDGER = "SELECT balance, charges FROM ledger"


def ground_truth(url: str) -> tuple[dict, dict]:
    """The ledger {"balance", "charges"} (zeros if the store has none yet) and every record,
    {client key: outcome text, None while running}, read in one snapshot of the store at `url`."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None)) as db:
            db.execute("BEGIN")
            row = db.execute(LEDGER).fetchone()
            rows = db.execute(RECORDS).fetchall()
            db.execute("COMMIT")
    else:
        import anyio
        import asyncpg

        async def fetch():
            db = await asyncpg.connect(url)
            try:
                async with db.transaction(isolation="repeatable_read", readonly=True):
                    return await db.fetchrow(LEDGER), [tuple(row) for row in await db.fetch(RECORDS)]
            finally:
                await db.close()

        row, rows = anyio.run(fetch)
    ledger = {"balance": 0, "charges": 0} if row is None else {"balance": row[0], "charges": row[1]}
    # The store keys a record by the principal and the client's key, as a JSON array (K2).
    return ledger, {json.loads(stored)[-1]: outcome for stored, outcome in rows}


def postgres_admin(url: str, statement: str) -> None:
    """One statement on the PostgreSQL server of `url`, from its maintenance database."""
    import anyio
    import asyncpg

    async def run():
        db = await asyncpg.connect(url.rsplit("/", 1)[0] + "/postgres")
        try:
            await db.execute(statement)
        finally:
            await db.close()

    anyio.run(run)


# ----------------------------------------------------------------------------
# Quick: the store wiped between an attempt and its retry
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def wiped_aside(url: str, tmp_path: Path):
    """Wipe the store at `url` (its server stopped): an empty store answers there from now on.
    The old content is kept aside, and its URL yielded, only so the test can count what it held."""
    if url.startswith("sqlite:"):
        path, aside = Path(url.removeprefix("sqlite:")), tmp_path / "wiped"
        aside.mkdir()
        for part in path.parent.glob(path.name + "*"):  # the file, and its -wal and -shm if any
            part.rename(aside / part.name)
        yield f"sqlite:{aside / path.name}"
        return
    name = url.rsplit("/", 1)[1]
    postgres_admin(url, f"ALTER DATABASE {name} RENAME TO {name}_wiped")
    postgres_admin(url, f"CREATE DATABASE {name}")  # the fixture drops this one
    try:
        yield url.rsplit("/", 1)[0] + f"/{name}_wiped"
    finally:
        postgres_admin(url, f"DROP DATABASE {name}_wiped WITH (FORCE)")


def test_a_retry_after_the_store_was_wiped_runs_the_tool_again(store_url, tmp_path):
    """The record is the only memory of a key: with the store gone, the retry is a first attempt.

    The charge is answered, its server stopped, the store wiped (the SQLite file deleted,
    the PostgreSQL database dropped and made again; each kept aside to be counted), a
    server started again on the same URL, and the charge retried with the same key: it
    is claimed and charged anew, not replayed. Two charges now exist for one key, one in
    each store; the client saw two answers that look alike and could not tell.
    """
    from wire import start

    first = start("2x-stdio", "--store", store_url)
    try:
        answered = first.charge(100, key="order-1")
    finally:
        first.close()
    assert text_of(answered) == "Charged 100. New balance: 100"

    with wiped_aside(store_url, tmp_path) as old_store:
        again = start("2x-stdio", "--store", store_url)
        try:
            retried = again.charge(100, key="order-1")
            log = again.log()
        finally:
            again.close()
        assert error_type(retried) is None, retried
        # Run again, not replayed: the new store had no record to replay.
        assert "claimed: key='order-1'" in log and "replayed: key='order-1'" not in log, log
        assert text_of(retried) == "Charged 100. New balance: 100"  # the new ledger's first charge
        old_ledger, old_records = ground_truth(old_store)
        new_ledger, new_records = ground_truth(store_url)
    assert old_ledger == new_ledger == {"balance": 100, "charges": 1}
    assert set(old_records) == set(new_records) == {"order-1"}  # one key, charged in both: twice
