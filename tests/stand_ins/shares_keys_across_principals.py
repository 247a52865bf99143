"""A stand-in for the 2.x ledger server that breaks one rule: with authorisation on, its records are keyed by
the bare key, so every principal shares one key space (K2: MUST scope records to the authorisation
boundary). Bob sending Alice's key gets her result, her conflict or her in-progress error.
Run it as the ledger server over HTTP with --issuer: tokens are checked and scopes gated as there.
"""

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class SharesKeysAcrossPrincipals(Idempotency):
    """The layer, with the key as the client sent it: whose it is is never asked."""

    def _store_key(self, principal: tuple[str, ...], key: str) -> str:
        return key


ledger_server.main(SharesKeysAcrossPrincipals)
