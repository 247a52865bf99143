"""A stand-in for the 2.x ledger server that breaks one rule: a conflict or in-progress rejection becomes the
key's answer from then on, so the original's own retry is refused (S2: MUST return the earlier result)."""

from typing import Any, ClassVar

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import CONFLICT, IN_PROGRESS
from mcp_idempotency_demo import ledger_server


class RecordsItsOwnRejections(Idempotency):
    """The layer, answering a key with its recorded rejection, if it has one."""

    rejections: ClassVar[dict[str, MCPError]] = {}  # key -> the rejection recorded as its outcome

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        key = (ctx.params or {}).get("idempotencyKey")
        if isinstance(key, str) and key in self.rejections:
            raise self.rejections[key]
        try:
            return await super().intercept_tool_call(params, ctx, call_next)
        except MCPError as rejected:
            if isinstance(key, str) and (rejected.error.data or {}).get("type") in (CONFLICT, IN_PROGRESS):
                self.rejections[key] = rejected
            raise


ledger_server.main(RecordsItsOwnRejections)
