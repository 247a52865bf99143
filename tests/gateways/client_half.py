"""The package's client half through a gateway, as its README calls it: one logical charge, each attempt given a
second, against a server whose charge takes longer, so the retry meets the first attempt still running.

    python client_half.py http://127.0.0.1:PORT/mcp

Run by the mcp 2.x interpreter; prints one JSON line: what discover_settings saw, and the call's outcome.
"""

import json
import sys

import anyio
from mcp import Client

from mcp_idempotency.client import GaveUp, KeyRefused, Policy, call_tool, discover_settings

# Each attempt given a second, the waits between them short, enough attempts to outlast a 3 s charge.
POLICY = Policy(timeout=1, attempts=8, first_back_off=0.25, max_back_off=1)


async def main(url: str) -> None:
    """Discover the promise, make the call, print what came back."""
    async with Client(url) as client:
        settings = await discover_settings(client)  # None behind a gateway that drops the capability
        try:
            result = await call_tool(client, "charge_guarded", {"amount": 7}, settings=settings, policy=POLICY)
            outcome = {
                "isError": bool(result.is_error),
                "text": " ".join(getattr(c, "text", "") for c in result.content),
            }
        except (KeyRefused, GaveUp) as error:
            outcome = {"raised": type(error).__name__, "text": str(error)}
    print(json.dumps({"settings_seen": settings is not None, **outcome}), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
