"""A stand-in for the 2.x ledger server that breaks one rule: a duplicate of a call still running runs the tool
too, as a server that looks for a completed record only would (S0, S1: MUST NOT start a second execution)."""

from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import IN_PROGRESS
from mcp_idempotency_demo import ledger_server


class RunsInFlightDuplicates(Idempotency):
    """The layer, sending the duplicate to the tool where it would refuse it as in progress."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        try:
            return await super().intercept_tool_call(params, ctx, call_next)
        except MCPError as rejected:
            if (rejected.error.data or {}).get("type") != IN_PROGRESS:
                raise
            return await call_next(ctx)


ledger_server.main(RunsInFlightDuplicates)
