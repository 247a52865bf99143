"""A stand-in for the 2.x ledger server that breaks one rule: its rejections carry no data.retryable (issue 25,
decision 1), so a client that branches on it cannot tell "send it again later" from "never send it again".
--of KIND drops it from that kind of rejection only (default: every kind)."""

import argparse
from typing import Any, ClassVar

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import CONFLICT, IN_PROGRESS, INVALID_KEY, STORE_FULL, STORE_UNAVAILABLE
from mcp_idempotency_demo import ledger_server

# --of NAME -> the error.data.type of the rejections that lose it
KINDS = {
    "conflict": CONFLICT,
    "in-progress": IN_PROGRESS,
    "invalid-key": INVALID_KEY,
    "store-full": STORE_FULL,
    "store-unavailable": STORE_UNAVAILABLE,
}


class DropsRetryable(Idempotency):
    """The layer, with `retryable` taken out of the error.data of every rejection of the `dropped` kinds."""

    dropped: ClassVar[tuple[str, ...]]

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        try:
            return await super().intercept_tool_call(params, ctx, call_next)
        except MCPError as rejected:
            data = rejected.error.data
            if not isinstance(data, dict) or "retryable" not in data or data.get("type") not in self.dropped:
                raise
            kept = {name: value for name, value in data.items() if name != "retryable"}
            raise MCPError(rejected.error.code, rejected.error.message, kept) from None


parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0], allow_abbrev=False)
parser.add_argument("--of", choices=KINDS, help="the one kind of rejection that loses it (default: every kind)")
chosen, ledger_options = parser.parse_known_args()
DropsRetryable.dropped = tuple(KINDS.values()) if chosen.of is None else (KINDS[chosen.of],)
ledger_server.main(DropsRetryable, ledger_options)
