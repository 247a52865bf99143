"""A stand-in for the 2.x ledger server that breaks one rule: a duplicate of a running call waits for the
original and gets its result, instead of an in-progress error at once (S1: SHOULD reject at once)."""

from typing import Any

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import IN_PROGRESS
from mcp_idempotency_demo import ledger_server


class QueuesInFlightDuplicates(Idempotency):
    """The layer, asking again every 50 ms while the key is in progress: the duplicate is queued."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        while True:
            try:
                return await super().intercept_tool_call(params, ctx, call_next)
            except MCPError as rejected:
                if (rejected.error.data or {}).get("type") != IN_PROGRESS:
                    raise
            await anyio.sleep(0.05)


ledger_server.main(QueuesInFlightDuplicates)
