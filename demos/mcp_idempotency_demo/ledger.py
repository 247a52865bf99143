"""The demo's ledger: a balance and a count of charges, kept in the idempotency store's unit of work (P17).

The stores know nothing of it: it is a tool's own data, written through the unit of
work's public API, so a keyed charge commits, or rolls back, with its record. It is
one row of its own table, the same SQL on every store: `TABLES` makes it as the store
opens (the layout schema version 2 of the stores held, so a store upgraded in place
keeps its ledger). `Amount` is what its charge tools take as an amount.
"""

from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema  # pydantic ships with every mcp

from mcp_idempotency.stores import Row, Transaction

# ----------------------------------------------------------------------------
# What the ledger takes as an amount
# ----------------------------------------------------------------------------

# P3, applied to the charge tools: they take 100 and 100.0 as the same amount,
# since they are the same request; a string or a boolean is not an amount
# (strict), whatever it spells. An integer is held exactly, however large; a float
# from 2^53 on may be a rounded integer (2^53 + 1.0 parses as 2^53), so it is
# refused rather than charged as an amount nobody sent. server.py's charge takes
# the same amounts, spelled in its own pydantic Field.


def whole_positive(amount: object) -> int:
    """A charge is a positive whole number of units, exactly as sent: an integer, or a float that is one."""
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise ValueError(f"amount must be a number, not {amount!r}")
    if amount <= 0 or (isinstance(amount, float) and not amount.is_integer()):
        raise ValueError(f"amount must be a positive whole number, not {amount!r}")
    if isinstance(amount, float) and amount >= 2**53:
        raise ValueError(
            f"amount {amount!r} is not exactly a whole number (a float from 2**53 on may be rounded); "
            "write it as an integer"
        )
    return int(amount)


# An int to the tool that takes it (and to mypy): the validator, which sees the
# number as sent, decides, so the lax int validation after it only ever sees an int.
Amount = Annotated[int, BeforeValidator(whole_positive), WithJsonSchema({"type": "integer", "exclusiveMinimum": 0})]

# ----------------------------------------------------------------------------
# The ledger in the store
# ----------------------------------------------------------------------------

# Its table and its one row, for the store to make as it opens (open_store's `tables`),
# under its schema lock. The row is added only where none is seen: an INSERT ... ON
# CONFLICT would wait for a charge in flight on the row (a peer frozen mid-charge, P23)
# before this instance could start.
TABLES = (
    """CREATE TABLE IF NOT EXISTS ledger (
        id       integer PRIMARY KEY CHECK (id = 1),
        balance  bigint NOT NULL,
        charges  bigint NOT NULL
    )""",
    "INSERT INTO ledger SELECT 1, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)",
)
CHARGE = "UPDATE ledger SET balance = balance + $1, charges = charges + 1 RETURNING balance"
READ = "SELECT balance, charges FROM ledger"
RESET = "UPDATE ledger SET balance = 0, charges = 0"


async def create(tx: Transaction) -> None:
    """Make the ledger's table and its row in a unit of work, for a store opened without `TABLES`;
    instances starting together take turns on the ledger's lock."""
    await tx.lock("mcp_idempotency_demo.ledger")
    for statement in TABLES:
        await tx.execute(statement)


async def the_row(tx: Transaction, sql: str, *args: object) -> Row:
    """The ledger's one row, as `sql` reads or changes it."""
    row = await tx.fetchone(sql, *args)
    if row is None:
        raise LookupError("the ledger has no row: open the store with ledger.TABLES, or call ledger.create")
    return row


async def charge(tx: Transaction, amount: int) -> int:
    """Add one charge of `amount`; return the new balance."""
    return int((await the_row(tx, CHARGE, amount))[0])


async def read(tx: Transaction) -> dict[str, int]:
    """The ledger: {"balance": ..., "charges": ...}."""
    balance, charges = await the_row(tx, READ)
    return {"balance": balance, "charges": charges}


async def reset(tx: Transaction) -> None:
    """Zero the ledger; the idempotency records are left alone."""
    await tx.execute(RESET)
