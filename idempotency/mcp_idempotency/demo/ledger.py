"""The demo's ledger: a balance and a count of charges, written in the store's unit of work (P17)."""

from ..stores import Transaction


async def charge(tx: Transaction, amount: int) -> int:
    """Add one charge; return the new balance."""
    return await tx.charge(amount)


async def read(tx: Transaction) -> dict[str, int]:
    """The ledger: {"balance": ..., "charges": ...}."""
    return await tx.ledger()


async def reset(tx: Transaction) -> None:
    """Zero the ledger; the idempotency records are left alone."""
    await tx.reset_ledger()
