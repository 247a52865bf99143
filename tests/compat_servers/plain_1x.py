"""A server WITHOUT the feature, on mcp 1.x: the ledger's two tools on a plain FastMCP, no idempotency layer.
It knows nothing of idempotencyKey and declares no capability (docs/backward-compatibility.md)."""

import json

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("plain-1x", log_level="WARNING")
charges = 0


@mcp.tool()
def charge_guarded(amount: int) -> str:
    """Charge `amount`: the side effect a retry must not repeat."""
    global charges
    charges += 1
    return f"Charged {amount}. Charges: {charges}"


@mcp.tool()
def get_balance() -> str:
    """How many charges ran."""
    return json.dumps({"charges": charges})


if __name__ == "__main__":
    mcp.run()
