"""A shop written from the package README alone: a payment kept in the store, and a receipt e-mailed elsewhere.

    python shop.py [--store URL] [--outbox PATH] [--delay SECONDS] [--retention SECONDS] [--lease SECONDS]
                   [--max-records N] [--transport stdio|http] [--port PORT]

`pay` writes its effect in the store, in the layer's unit of work: the payment and the record of
the call commit together. `send_receipt` has its effect elsewhere: here a line appended to the
`--outbox` file, standing for a mail provider's API. Both take an account: more arguments than
the conformance kit's own, which it is given with --tool-arguments.
"""

import argparse
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Limits

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--store", default="sqlite:shop.db")
parser.add_argument("--outbox", type=Path, default=Path("outbox.txt"), help="where receipts are 'sent'")
parser.add_argument("--delay", type=float, default=0.0, help="seconds each payment takes")
parser.add_argument("--retention", type=float, default=Limits.retention)
parser.add_argument("--lease", type=float, default=Limits.lease)
parser.add_argument("--deadline", type=float, default=Limits.deadline, help="seconds a keyed call may run")
parser.add_argument("--max-records", type=int, default=Limits.max_records)
parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
parser.add_argument("--port", type=int, default=8000, help="HTTP: on 127.0.0.1, at /mcp")
options = parser.parse_args()

# The tables the tools keep in the store: made as the store opens, on SQLite, PostgreSQL or memory alike.
BALANCES = "CREATE TABLE IF NOT EXISTS balances (account TEXT PRIMARY KEY, balance BIGINT NOT NULL, payments BIGINT)"
keys = Idempotency(
    options.store,
    limits=Limits(
        retention=options.retention, lease=options.lease, max_records=options.max_records, deadline=options.deadline
    ),
    tables=[BALANCES],
)
mcp = MCPServer("shop", version="1.0", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)


@mcp.tool()
async def pay(account: str, amount: int) -> str:
    """Pay `amount` into `account`: the effect a retry must not repeat, kept in the store."""
    if amount <= 0:
        raise ValueError("amount must be a positive number")
    await anyio.sleep(options.delay)
    async with keys.transaction() as tx:  # under a key, the layer's own: the payment and its record commit together
        await tx.execute(
            "INSERT INTO balances VALUES ($1, $2, 1) "
            "ON CONFLICT (account) DO UPDATE SET balance = balances.balance + $2, payments = balances.payments + 1",
            account,
            amount,
        )
        row = await tx.fetchone("SELECT balance FROM balances WHERE account = $1", account)
    return f"Paid {amount} into {account}: balance {row[0] if row else amount}"


@mcp.tool()
async def send_receipt(account: str, amount: int) -> str:
    """E-mail `account` a receipt for `amount`: an effect outside the store (the outbox stands for a mail API)."""
    # A mail API would take the key as its Idempotency-Key header; the outbox line shows what it was sent.
    with options.outbox.open("a", encoding="utf-8") as outbox:
        outbox.write(f"to {account}: your payment of {amount} (Idempotency-Key: {keys.downstream_key()})\n")
    return f"Receipt for {amount} sent to {account}"


@mcp.tool()
async def payments(account: str | None = None) -> dict[str, int]:
    """How many payments `account` received, and its balance; every account's, without one."""
    async with keys.transaction() as tx:
        row = await tx.fetchone(
            "SELECT count(*), coalesce(sum(payments), 0), coalesce(sum(balance), 0) FROM balances "
            "WHERE CAST($1 AS TEXT) IS NULL OR account = $1",
            account,
        )
    _, count, balance = row if row else (0, 0, 0)
    return {"payments": int(count), "balance": int(balance)}


keys.check()  # a store that cannot open as configured ends the process here, in one line naming the fix
if options.transport == "http":
    mcp.run("streamable-http", port=options.port, stateless_http=True)
else:
    mcp.run()
