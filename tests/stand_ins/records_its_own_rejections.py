"""A stand-in for sdk2/server.py that breaks one rule: a conflict or in-progress rejection becomes the
key's answer from then on, so the original's own retry is refused (S2: MUST return the earlier result)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402

idempotent_tools_call = server.idempotent_tools_call
rejections = {}  # key -> the rejection recorded as its outcome


async def recording_rejections(ctx, call_next):
    """Answer a key with its recorded rejection, if it has one; record every conflict and in-progress."""
    key = (ctx.params or {}).get("idempotencyKey")
    if isinstance(key, str) and key in rejections:
        raise rejections[key]
    try:
        return await idempotent_tools_call(ctx, call_next)
    except server.MCPError as rejected:
        if (rejected.error.data or {}).get("type") in (server.CONFLICT, server.IN_PROGRESS):
            rejections[key] = rejected
        raise


server.idempotent_tools_call = recording_rejections
server.main()
