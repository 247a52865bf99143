"""A 2.x ledger server for mcp_idempotency/client.py's tests: the layer, plus rejections on request, so the
policy can be shown to honour what a server declares.

    .venv-2x/bin/python tests/policy_server.py [ledger server options]

Its settings are the ledger server's own (--max-key-length N: keys longer than N are invalid, and the
capability says maxKeyLength N). A charge whose `note` is {"reject": DATA, "times": T} is refused, under its
key, T times with -32602 and error.data DATA before it runs: a server whose rejections the policy must read.
"""

from collections import Counter
from typing import Any, ClassVar

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency import rules
from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class PolicyServer(Idempotency):
    """The layer, with rejections on request."""

    refused: ClassVar[Counter[str]] = Counter()  # key -> how many times its call was refused so far

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        sent = ctx.params or {}
        note = (sent.get("arguments") or {}).get("note")
        key = sent.get("idempotencyKey")
        if isinstance(note, dict) and "reject" in note and self.refused[key] < note.get("times", 1):
            self.refused[key] += 1
            raise MCPError(rules.ERROR_CODE, "refused on request (tests/policy_server.py)", note["reject"])
        return await super().intercept_tool_call(params, ctx, call_next)


if __name__ == "__main__":
    ledger_server.main(PolicyServer)
