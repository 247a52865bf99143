"""A stand-in for the 2.x ledger server that breaks one rule: it checks an idempotencyKey on any method, and
refuses tools/list with a key that is not a string (W2: only tools/call is covered; elsewhere it is no key)."""

from typing import Any

from mcp.server.context import CallNext, HandlerResult

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class ExaminesTheKeyOnEveryMethod(Idempotency):
    """The layer, reading the key of every request, as if every method were keyed."""

    async def advertise(self, ctx: Any, call_next: CallNext) -> HandlerResult:
        if ctx.request_id is not None and ctx.method != "tools/call" and isinstance(ctx.params, dict):
            self._key_of(ctx.params)  # an invalid key is refused, whatever the method
        return await super().advertise(ctx, call_next)


ledger_server.main(ExaminesTheKeyOnEveryMethod)
