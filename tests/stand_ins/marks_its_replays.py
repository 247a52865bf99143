"""A stand-in for the 2.x ledger server that breaks one rule: a replayed result carries one more content item saying
it is a replay (S2, S2b: the retry gets the previously produced result, no replay marker added). The tool runs once
per key; only what the retry is told differs from what the original was."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Held
from mcp_idempotency_demo import ledger_server

MARKER = {"type": "text", "text": "(a replay of the key's first result)"}


class MarksItsReplays(Idempotency):
    """The layer, adding a note to every result it replays."""

    def answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        replayed = super().answer(held, fingerprint, key, ctx)
        return {**replayed, "content": [*replayed.get("content", []), MARKER]}


ledger_server.main(MarksItsReplays)
