"""The shared store read directly, not through a server: what the several-instance tests audit."""

import contextlib
import json
import re
import sqlite3
from collections import Counter


def read_store(url: str) -> tuple[dict | None, dict, int]:
    """The demo's ledger (None where no ledger server ever started: the store itself has no ledger),
    every record's outcome (None while running) and the store's own count of its records (P9), read
    in one snapshot."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None)) as db:
            db.execute("BEGIN")
            ledger = None
            if db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'ledger'").fetchone():
                balance, charges = db.execute("SELECT balance, charges FROM ledger").fetchone()
                ledger = {"balance": balance, "charges": charges}
            records = dict(db.execute("SELECT key, outcome FROM idempotency_records"))
            (counted,) = db.execute("SELECT n FROM idempotency_record_count").fetchone()
            db.execute("COMMIT")
        return ledger, records, counted

    import anyio
    import asyncpg

    async def fetch():
        db = await asyncpg.connect(url)
        try:
            async with db.transaction(isolation="repeatable_read", readonly=True):
                ledger = None
                if await db.fetchval("SELECT to_regclass('ledger') IS NOT NULL"):
                    ledger = dict(await db.fetchrow("SELECT balance, charges FROM ledger"))
                records = {
                    row["key"]: row["outcome"] for row in await db.fetch("SELECT key, outcome FROM idempotency_records")
                }
                counted = await db.fetchval("SELECT n FROM idempotency_record_count")
            return ledger, records, counted
        finally:
            await db.close()

    return anyio.run(fetch)


def execute(url: str, statement: str) -> int:
    """Run one SQL statement on the store directly, as an older version or an operator would; the rows it
    touched (-1 for a statement that touches none, as sqlite3 counts)."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"))) as db, db:
            return db.execute(statement).rowcount

    import anyio
    import asyncpg

    async def run():
        db = await asyncpg.connect(url)
        try:
            status = await db.execute(statement)  # e.g. "UPDATE 1", or "CREATE TABLE"
        finally:
            await db.close()
        return int(status.split()[-1]) if status.split()[-1].isdigit() else -1

    return anyio.run(run)


CHARGED = re.compile(r"Charged (\d+)\. New balance: (\d+)")


def audit(url: str) -> tuple[dict, set]:
    """Check that the ledger holds exactly the recorded charges, and that the store's count of
    its records is true; return {key: (amount, balance)} and the running keys, for a store
    whose callers are one principal (the server keys a record by its principal and key, K2).

    Charges commit one after another, so the balances the completed records report,
    sorted, must climb from 0 by each record's own amount to the ledger's balance,
    in as many steps as the ledger counts charges.
    """
    ledger, records, counted = read_store(url)
    assert counted == len(records), f"the store counts {counted} records and holds {len(records)}: P9's bound drifted"
    records = {json.loads(stored)[-1]: outcome for stored, outcome in records.items()}
    assert len(records) == counted, "records of more than one principal"
    completed = {}
    for key, outcome in records.items():
        if outcome is not None:
            amount, balance = CHARGED.fullmatch(json.loads(outcome)["result"]["content"][0]["text"]).groups()
            completed[key] = (int(amount), int(balance))
    balance = 0
    for key, (amount, after) in sorted(completed.items(), key=lambda item: item[1][1]):
        assert after == balance + amount, f"{key}: {after} after {balance} + {amount}: a charge with no record"
        balance = after
    assert ledger == {"balance": balance, "charges": len(completed)}, "the ledger holds charges no record accounts for"
    return completed, {key for key, outcome in records.items() if outcome is None}


DECISION = re.compile(
    r"idempotency: (claimed|recorded|replayed|in progress|conflict|lease lost|store full): "
    r"key='([^']*)'"
)


def decisions(*wires) -> Counter:
    """(decision, key) -> how many times the servers logged it, over all their logs."""
    return Counter(match.groups() for wire in wires for match in DECISION.finditer(wire.log()))
