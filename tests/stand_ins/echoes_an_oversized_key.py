"""A stand-in for the 2.x ledger server that breaks one rule: it takes keys of up to two million characters
(P2: 1 to 255), so a one-megabyte key is valid to it, and the conflict it answers that key with echoes
the megabyte back (error.data.idempotencyKey), as the seed prototype did. Its first answer to the key is
small: only the conflict path shows it. Its capability says the length it takes, so that no MUST of the
capability's settings is broken beside it."""

import hashlib
from typing import Any

from mcp.shared.exceptions import MCPError

from mcp_idempotency import rules
from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import CallNext, Idempotency

LONGEST_KEY = 2 * 1024 * 1024


class EchoesAnOversizedKey(Idempotency):
    """The layer, holding a key past 255 characters by its digest, and naming it as sent in every rejection."""

    def advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        result = super().advertised(result)
        result["capabilities"]["tools"]["idempotency"]["maxKeyLength"] = LONGEST_KEY
        return result

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        key = ctx.params.get("idempotencyKey") if isinstance(ctx.params, dict) else None
        if not (isinstance(key, str) and rules.MAX_KEY_LENGTH < len(key) <= LONGEST_KEY):
            return await super().tools_call(ctx, call_next)
        ctx.params["idempotencyKey"] = hashlib.sha256(key.encode()).hexdigest()  # 64 characters: valid to the layer
        try:
            return await super().tools_call(ctx, call_next)
        except MCPError as rejected:
            data = rejected.error.data
            if not isinstance(data, dict) or "idempotencyKey" not in data:
                raise
            raise MCPError(rejected.error.code, rejected.error.message, {**data, "idempotencyKey": key}) from None


ledger_server.main(EchoesAnOversizedKey)
