"""A stand-in for the 2.x ledger server that breaks one rule: it ignores idempotencyKey (S0, S2).
It still advertises the capability, so a client that checked it would trust it.
"""

from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class IgnoresTheKey(Idempotency):
    """The layer, with every tools/call sent to the tool, key or no key."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        return await call_next(ctx)


ledger_server.main(IgnoresTheKey)
