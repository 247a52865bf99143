"""A stand-in for sdk2/server.py that breaks one rule: the same key with other arguments gets the
recorded result back instead of a conflict (S3: MUST NOT silently return the cached result)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402

answer = server.answer


def answer_without_conflict(held, fingerprint, key, ctx):
    """Treat any record as the same request: the fingerprint is never compared."""
    return answer(held, held.fingerprint, key, ctx)


server.answer = answer_without_conflict
server.main()
