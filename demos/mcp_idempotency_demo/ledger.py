"""The demo's ledger: a balance and a count of charges, kept in the idempotency store's unit of work (P17).

The stores know nothing of it: it is a tool's own data, written through the unit of
work's public API, so a keyed charge commits, or rolls back, with its record. On a
SQL store it is one row of its own table, which `create` makes as the server starts
(the layout schema version 2 of the stores held, so a store upgraded in place keeps
its ledger); on the memory store, two numbers by name. `Amount` is what its charge
tools take as an amount.
"""

import sqlite3
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, StrictFloat, StrictInt, WithJsonSchema  # pydantic ships with every mcp

from mcp_idempotency.stores import Transaction
from mcp_idempotency.stores.memory import MemoryTransaction
from mcp_idempotency.stores.sqlite import SQLiteTransaction

if TYPE_CHECKING:
    from mcp_idempotency.stores.postgres import PostgresTransaction

# ----------------------------------------------------------------------------
# What the ledger takes as an amount
# ----------------------------------------------------------------------------

# P3, applied to the charge tools: they take 100 and 100.0 as the same amount,
# since they are the same request; a string or a boolean is not an amount
# (strict), whatever it spells. An integer is held exactly, however large; a float
# from 2^53 on may be a rounded integer (2^53 + 1.0 parses as 2^53), so it is
# refused rather than charged as an amount nobody sent. server.py's charge takes
# the same amounts, spelled in its own pydantic Field.


def whole_positive(amount: int | float) -> int:
    """A charge is a positive whole number of units, exactly as sent."""
    if amount <= 0 or (isinstance(amount, float) and not amount.is_integer()):
        raise ValueError(f"amount must be a positive whole number, not {amount!r}")
    if isinstance(amount, float) and amount >= 2**53:
        raise ValueError(
            f"amount {amount!r} is not exactly a whole number (a float from 2**53 on may be rounded); "
            "write it as an integer"
        )
    return int(amount)


Amount = Annotated[
    StrictInt | StrictFloat,
    AfterValidator(whole_positive),
    WithJsonSchema({"type": "integer", "exclusiveMinimum": 0}),
]

# ----------------------------------------------------------------------------
# The ledger in the store
# ----------------------------------------------------------------------------

BALANCE, CHARGES = "ledger.balance", "ledger.charges"  # the memory store's names

# SQLite. Several instances starting at once take turns: a unit of work's first
# statement takes the file's write lock (BEGIN IMMEDIATE).
SQLITE_TABLE = """
CREATE TABLE IF NOT EXISTS ledger (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    balance  INTEGER NOT NULL,
    charges  INTEGER NOT NULL
)"""
SQLITE_ROW = "INSERT OR IGNORE INTO ledger VALUES (1, 0, 0)"
SQLITE_CHARGE = "UPDATE ledger SET balance = balance + ?, charges = charges + 1 RETURNING balance"

# PostgreSQL. CREATE TABLE IF NOT EXISTS is not safe against another session running
# it at the same moment (both may insert the type: a unique violation), so instances
# starting together take turns on a lock of the ledger's own, held to the commit. The
# row is added only where none is seen: an INSERT ... ON CONFLICT would wait for a
# charge in flight on the row (a peer frozen mid-charge, P23) before this one could start.
POSTGRES_TABLE = """
SELECT pg_advisory_xact_lock(hashtext('mcp_idempotency_demo.ledger'));
CREATE TABLE IF NOT EXISTS ledger (
    id       integer PRIMARY KEY CHECK (id = 1),
    balance  bigint NOT NULL,
    charges  bigint NOT NULL
);
INSERT INTO ledger SELECT 1, 0, 0 WHERE NOT EXISTS (SELECT FROM ledger)"""
POSTGRES_CHARGE = "UPDATE ledger SET balance = balance + $1, charges = charges + 1 RETURNING balance"

READ = "SELECT balance, charges FROM ledger"
RESET = "UPDATE ledger SET balance = 0, charges = 0"


def postgres(tx: Transaction) -> "PostgresTransaction":
    """The one other kind of store; imported here only once one is open (asyncpg is an optional extra)."""
    from mcp_idempotency.stores.postgres import PostgresTransaction

    if not isinstance(tx, PostgresTransaction):
        raise TypeError(f"the ledger cannot be kept in a {type(tx).__name__}")
    return tx


async def create(tx: Transaction) -> None:
    """Make the ledger's table and its one row, unless they are there already; the memory store needs none."""
    if isinstance(tx, MemoryTransaction):
        return
    if isinstance(tx, SQLiteTransaction):

        def made(db: sqlite3.Connection) -> None:
            db.execute(SQLITE_TABLE)
            db.execute(SQLITE_ROW)

        await tx.run(made)
        return
    await postgres(tx).run(lambda db: db.execute(POSTGRES_TABLE))


async def charge(tx: Transaction, amount: int) -> int:
    """Add one charge; return the new balance."""
    if isinstance(tx, MemoryTransaction):
        tx.add(CHARGES, 1)
        return tx.add(BALANCE, amount)
    if isinstance(tx, SQLiteTransaction):
        return int(await tx.run(lambda db: db.execute(SQLITE_CHARGE, (amount,)).fetchone()[0]))
    return int(await postgres(tx).run(lambda db: db.fetchval(POSTGRES_CHARGE, amount)))


async def read(tx: Transaction) -> dict[str, int]:
    """The ledger: {"balance": ..., "charges": ...}."""
    if isinstance(tx, MemoryTransaction):
        return {"balance": tx.value(BALANCE), "charges": tx.value(CHARGES)}
    if isinstance(tx, SQLiteTransaction):
        balance, charges = await tx.run(lambda db: db.execute(READ).fetchone())
        return {"balance": balance, "charges": charges}
    return dict(await postgres(tx).run(lambda db: db.fetchrow(READ)))


async def reset(tx: Transaction) -> None:
    """Zero the ledger; the idempotency records are left alone."""
    if isinstance(tx, MemoryTransaction):
        tx.add(BALANCE, -tx.value(BALANCE))
        tx.add(CHARGES, -tx.value(CHARGES))
    elif isinstance(tx, SQLiteTransaction):
        await tx.run(lambda db: db.execute(RESET))
    else:
        await postgres(tx).run(lambda db: db.execute(RESET))
