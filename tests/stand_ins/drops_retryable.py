"""A stand-in for the 2.x ledger server that breaks one rule: its rejections carry no data.retryable (issue 25,
decision 1), so a client that branches on it cannot tell "send it again later" from "never send it again"."""

from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class DropsRetryable(Idempotency):
    """The layer, with `retryable` taken out of every rejection's error.data."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        try:
            return await super().intercept_tool_call(params, ctx, call_next)
        except MCPError as rejected:
            data = rejected.error.data
            if not isinstance(data, dict) or "retryable" not in data:
                raise
            kept = {name: value for name, value in data.items() if name != "retryable"}
            raise MCPError(rejected.error.code, rejected.error.message, kept) from None


ledger_server.main(DropsRetryable)
