"""A stand-in for the 2.x ledger server that breaks one rule: its fingerprint covers the request's _meta beside
the tool name and arguments (E1: equivalence is decided solely by those two), so a retry with another progress
token, or a trace id a proxy added, is a conflict instead of the replay."""

from typing import Any

from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import CallNext, Idempotency


class ComparesMetaToo(Idempotency):
    """The layer, fingerprinting the arguments with _meta folded in; the tool still gets the arguments as sent."""

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        params = ctx.params
        if not (isinstance(params, dict) and isinstance(params.get("arguments", {}), dict) and "_meta" in params):
            return await super().tools_call(ctx, call_next)
        sent = dict(params)
        params["arguments"] = {**params.get("arguments", {}), "_meta": params["_meta"]}  # what the fingerprint sees

        async def tool(ctx: Any) -> Any:
            ctx.params = sent  # what the tool sees: the params as sent
            return await call_next(ctx)

        return await super().tools_call(ctx, tool)


ledger_server.main(ComparesMetaToo)
