"""A stand-in for the 2.x ledger server that breaks one rule: the same key with other arguments gets the
recorded result back instead of a conflict (S3: MUST NOT silently return the cached result)."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Held
from mcp_idempotency_demo import ledger_server


class ReplaysAConflict(Idempotency):
    """The layer, treating any record as the same request: the fingerprint is never compared."""

    def _answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        return super()._answer(held, held.fingerprint, key, ctx)


ledger_server.main(ReplaysAConflict)
