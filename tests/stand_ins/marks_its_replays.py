"""A stand-in for the 2.x ledger server that breaks one rule: a replay says it is one (S2, S2b: the retry gets the
previously produced result, whether a result or an error, no replay marker added): a replayed result carries one
more content item, a replayed error one more clause in its message. The tool runs once per key; only what the retry
is told differs from what the original was."""

from typing import Any

from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Held
from mcp_idempotency_demo import ledger_server

MARKER = "(a replay of the key's first outcome)"


class MarksItsReplays(Idempotency):
    """The layer, adding a note to every outcome it replays."""

    def _answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        try:
            replayed = super()._answer(held, fingerprint, key, ctx)
        except MCPError as refused:
            if held.outcome is None or held.fingerprint != fingerprint:  # a rejection of ours, not a replay
                raise
            raise MCPError(refused.error.code, f"{refused.error.message} {MARKER}", refused.error.data) from None
        return {**replayed, "content": [*replayed.get("content", []), {"type": "text", "text": MARKER}]}


ledger_server.main(MarksItsReplays)
