"""A stand-in for the 2.x ledger server that breaks one rule: the same key with other arguments is answered with a
tool's error result (isError), not rejected (S3: the server MUST reject it). Nothing runs and the original's result is
not sent: only the answer's form is wrong, and a client that looks for a JSON-RPC error sees a tool that failed."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Held
from mcp_idempotency_demo import ledger_server


class AnswersAConflictAsAToolError(Idempotency):
    """The layer, with a conflict told as the tool's own failure."""

    def _answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        if held.fingerprint != fingerprint:
            told = {"type": "text", "text": f"key {key} was used with other arguments"}
            return {"resultType": "complete", "content": [told], "isError": True}
        return super()._answer(held, fingerprint, key, ctx)


ledger_server.main(AnswersAConflictAsAToolError)
