"""A stand-in for sdk2/server.py that breaks one rule: a duplicate of a running call waits for the
original and gets its result, instead of an in-progress error at once (S1: SHOULD reject at once)."""

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402

idempotent_tools_call = server.idempotent_tools_call


async def queued(ctx, call_next):
    """Ask again every 50 ms while the key is in progress: the duplicate is queued behind the original."""
    while True:
        try:
            return await idempotent_tools_call(ctx, call_next)
        except server.MCPError as rejected:
            if (rejected.error.data or {}).get("type") != server.IN_PROGRESS:
                raise
        await anyio.sleep(0.05)


server.idempotent_tools_call = queued
server.main()
