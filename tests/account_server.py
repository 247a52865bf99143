"""A server whose charge tool needs more than an amount, for the kit's --tool-arguments: every tool takes an account.

    python account_server.py [--transport stdio|http] [--port PORT] [--tasks-store sqlite:PATH]

`charge` charges an account once per call that runs, `charges` reads that account's count (`refunds`
beside it never moves), and `charge_offline` always fails: a correct server, and two tools that cannot
be the kit's fixture. With --tasks-store it declares the tasks extension, yet runs no tool as a task.
"""

import argparse
from typing import Any

from mcp.server.mcpserver import MCPServer

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import Placement
from mcp_idempotency_demo import tasks
from mcp_idempotency_demo.ledger_server import with_tasks

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
parser.add_argument("--port", type=int, default=8000, help="HTTP: on 127.0.0.1, at /mcp")
parser.add_argument("--tasks-store", metavar="sqlite:PATH", help="declare tasks, kept in this store (and the keys)")
options = parser.parse_args()


keys = Idempotency(
    options.tasks_store or "memory",
    tables=tasks.TABLES if options.tasks_store else (),
    placement=Placement.PARAMS,  # the SEP's field, which the kit sends by default
)
layers: dict[str, Any] = {"extensions": [keys], "middleware": [keys.advertise], "lifespan": keys.lifespan}
if options.tasks_store:
    layers = with_tasks(keys, task_tools=())  # the extension declared, no tool of it
mcp = MCPServer("accounts", version="1.0", **layers)
counts: dict[str, int] = {}


@mcp.tool()
def charge(account: str, amount: int) -> str:
    """Charge `account` `amount`: the side effect a retry must not repeat."""
    if amount <= 0:
        raise ValueError("amount must be positive")
    counts[account] = counts.get(account, 0) + 1
    return f"charge #{counts[account]} of {account}: {amount}"


@mcp.tool()
def charges(account: str) -> dict[str, int]:
    """How many charges `account` has had; no charge is ever refunded."""
    return {"charges": counts.get(account, 0), "refunds": 0}


@mcp.tool()
def charge_offline(account: str, amount: int) -> str:
    """A charge tool whose payments are always down."""
    raise RuntimeError(f"payments are offline: {account} was not charged {amount}")  # the SDK answers isError


if options.transport == "http":
    mcp.run("streamable-http", port=options.port, stateless_http=True)
else:
    mcp.run()
