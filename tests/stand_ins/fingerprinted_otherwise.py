"""What the stand-ins whose fingerprint, or key, differs from the layer's share (not a stand-in itself): the layer
reads the key and fingerprints the params as `seen` makes them, and the tool still gets them as they were sent."""

from typing import Any

from mcp_idempotency.layer import CallNext, Idempotency


class FingerprintedOtherwise(Idempotency):
    """The layer, shown other params than the tool gets: only what it decides from them changes."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        """The params as this stand-in's layer reads them (key and fingerprint); each stand-in overrides it."""
        raise NotImplementedError

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        sent = ctx.params
        if not isinstance(sent, dict):
            return await super().tools_call(ctx, call_next)
        ctx.params = self.seen(dict(sent))

        async def tool(ctx: Any) -> Any:
            ctx.params = sent  # the tool, and the SDK's validation of its arguments, see what was sent
            return await call_next(ctx)

        return await super().tools_call(ctx, tool)
