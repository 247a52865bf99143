"""A stand-in for the 2.x ledger server that breaks one rule: it reads every number as a double before it
fingerprints, as JSON.parse does, and still takes the keyed call (issue 25, decision 3): 9007199254740993
and 9007199254740992 are one request to it, and the second replays the first's result."""

from typing import Any

from mcp_idempotency.layer import CallNext, Idempotency
from mcp_idempotency_demo import ledger_server


def as_doubles(value: Any) -> Any:
    """The value as a parser of doubles leaves it: every integer rounded to the nearest double."""
    if type(value) is int:
        return float(value) if abs(value) > 2**53 else value
    if type(value) is dict:
        return {name: as_doubles(item) for name, item in value.items()}
    if type(value) is list:
        return [as_doubles(item) for item in value]
    return value


class ComparesIntegersAsDoubles(Idempotency):
    """The layer, fed arguments whose large integers are already rounded (the tool sees them so too)."""

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        if isinstance(ctx.params, dict) and isinstance(ctx.params.get("arguments"), dict):
            ctx.params["arguments"] = as_doubles(ctx.params["arguments"])
        return await super().tools_call(ctx, call_next)


ledger_server.main(ComparesIntegersAsDoubles)
