"""A stand-in for the 2.x ledger server with --tasks that breaks one rule: a keyed call that declares the extension
goes to Tasks before any key is looked at (P24 has the layer see it first), so it gets a task of its own. A client
whose CreateTaskResult was lost sends the call again and gets another task id: not the handle the first call
produced (S2), and that task charges again."""

from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server
from mcp_idempotency_demo.tasks import declares_tasks


class MakesATaskPerCall(Idempotency):
    """The layer, passing a call that declared Tasks straight to the Tasks extension after it."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        if declares_tasks(ctx):
            return await call_next(ctx)
        return await super().intercept_tool_call(params, ctx, call_next)


ledger_server.main(MakesATaskPerCall)
