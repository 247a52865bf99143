"""A stand-in for sdk2/server.py that breaks one rule: with authorisation on, its records are keyed by
the bare key, so every principal shares one key space (K2: MUST scope records to the authorisation
boundary). Bob sending Alice's key gets her result, her conflict or her in-progress error.

Run it as sdk2/server.py over HTTP with --issuer: tokens are checked and scopes gated as there.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk2"))
import server  # noqa: E402


def bare_key(ctx, key: str) -> str:
    """The key as the client sent it: whose it is is never asked."""
    return key


server.record_key = bare_key
server.main()
