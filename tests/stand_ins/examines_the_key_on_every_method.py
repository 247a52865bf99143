"""A stand-in for the 2.x ledger server that breaks one rule: it checks an idempotencyKey on any method, and
refuses tools/list with a key that is not a string (W2: only tools/call is covered; elsewhere it is no key)."""

from typing import Any

from mcp_idempotency.layer import CallNext, Idempotency
from mcp_idempotency_demo import ledger_server


class ExaminesTheKeyOnEveryMethod(Idempotency):
    """The layer, reading the key of every request, as if every method were keyed."""

    async def __call__(self, ctx: Any, call_next: CallNext) -> Any:
        if ctx.request_id is not None and ctx.method != "tools/call" and isinstance(ctx.params, dict):
            self.key_of(ctx.params)  # an invalid key is refused, whatever the method
        return await super().__call__(ctx, call_next)


ledger_server.main(ExaminesTheKeyOnEveryMethod)
