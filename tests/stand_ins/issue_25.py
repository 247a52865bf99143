"""What issue 25 adds to every server, on the 2.x layer, until the layer itself has it (branch issue-25-servers).

Not a stand-in: the base the issue-25 stand-ins break one rule of, and the server
(tests/kit_targets.py's `meets-issue-25`) that shows each new check of the kit can pass.
  - every idempotency rejection's error.data carries `retryable` (issue 25, decision 1);
  - capabilities.tools.idempotency = {"maxKeyLength": 255, "retentionSeconds": R} (decision 2).
Integers are compared exactly (decision 3) and a running record is bounded by the lease
(decision 4) on the layer as it is. Once the layer does all four, this class adds nothing.

    python tests/stand_ins/issue_25.py [ledger server options]
"""

import math
from typing import Any

from mcp.shared.exceptions import MCPError

from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import CallNext, Idempotency
from mcp_idempotency import rules
from mcp_idempotency.rules import CONFLICT, IN_PROGRESS, INVALID_KEY, STORE_FULL, STORE_UNAVAILABLE

RETRYABLE = {IN_PROGRESS: True, STORE_FULL: True, STORE_UNAVAILABLE: True, CONFLICT: False, INVALID_KEY: False}


def with_retryable(rejected: MCPError) -> MCPError:
    """The rejection with data.retryable set from its type; any other error (a tool's, replayed) as it is."""
    data = rejected.error.data
    if not isinstance(data, dict) or data.get("type") not in RETRYABLE or "retryable" in data:
        return rejected
    return MCPError(rejected.error.code, rejected.error.message, {**data, "retryable": RETRYABLE[data["type"]]})


class MeetsIssue25(Idempotency):
    """The layer, with data.retryable on its rejections and its settings in the capability."""

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        try:
            return await super().tools_call(ctx, call_next)
        except MCPError as rejected:
            raise with_retryable(rejected) from None

    def advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        result = super().advertised(result)
        # Whole seconds, rounded up: a client told less than the window only stops retrying a little early.
        # rules.MAX_KEY_LENGTH read now, not at import: a server that sets its own limit advertises that one.
        settings = {"maxKeyLength": rules.MAX_KEY_LENGTH, "retentionSeconds": max(1, math.ceil(self.limits.retention))}
        result["capabilities"]["tools"]["idempotency"] = {**settings, **result["capabilities"]["tools"]["idempotency"]}
        return result


if __name__ == "__main__":
    ledger_server.main(MeetsIssue25)
