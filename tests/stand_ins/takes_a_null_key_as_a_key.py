"""A stand-in for the 2.x ledger server that breaks one rule: `"idempotencyKey": null` is taken as the key
"null" (W1, P2: an absent or null key is no key), so every call that sends null after the first replays it."""

from typing import Any

from mcp_idempotency.layer import CallNext, Idempotency
from mcp_idempotency_demo import ledger_server


class TakesANullKeyAsAKey(Idempotency):
    """The layer, with a null key spelled out as a string before it is read."""

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        if isinstance(ctx.params, dict) and "idempotencyKey" in ctx.params and ctx.params["idempotencyKey"] is None:
            ctx.params["idempotencyKey"] = "null"
        return await super().tools_call(ctx, call_next)


ledger_server.main(TakesANullKeyAsAKey)
