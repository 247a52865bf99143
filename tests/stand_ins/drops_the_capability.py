"""A stand-in for sdk2/server.py that breaks one rule: it deduplicates, but never declares
capabilities.tools.idempotency (C1), so a careful client cannot know it may rely on keys."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402

server.advertised = lambda result: result
server.main()
