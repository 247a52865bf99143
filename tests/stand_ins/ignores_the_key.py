"""A stand-in for sdk2/server.py that breaks one rule: it ignores idempotencyKey (S0, S2).

It still advertises the capability, so a client that checked it would trust it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402


async def passed_through(ctx, call_next):
    """Every tools/call goes to the tool, key or no key."""
    return await call_next(ctx)


server.idempotent_tools_call = passed_through
server.main()
