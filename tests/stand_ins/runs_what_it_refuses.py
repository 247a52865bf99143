"""A stand-in for the 2.x ledger server that breaks one rule: it runs the tool for a request it then refuses, chosen
by --refuses: a conflict (S3: the changed request MUST NOT run) or an invalid key (P2: refused before anything
runs). The refusal itself is the layer's, to the letter: only the count shows the tool ran."""

import argparse
from typing import Any, ClassVar

import mcp_types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import CONFLICT, INVALID_KEY
from mcp_idempotency_demo import ledger_server

# --refuses NAME -> the error.data.type of the refusals that run the tool first
REFUSALS = {"conflicts": CONFLICT, "invalid-keys": INVALID_KEY}


class RunsWhatItRefuses(Idempotency):
    """The layer, running the tool, unkeyed, before it sends a refusal of the chosen kind."""

    refused: ClassVar[str]

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        try:
            return await super().intercept_tool_call(params, ctx, call_next)
        except MCPError as refusal:
            if (refusal.error.data or {}).get("type") == self.refused:
                await call_next(ctx)
            raise


parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0], allow_abbrev=False)
parser.add_argument("--refuses", choices=REFUSALS, required=True, help="the refusals that run the tool first")
chosen, ledger_options = parser.parse_known_args()
RunsWhatItRefuses.refused = REFUSALS[chosen.refuses]
ledger_server.main(RunsWhatItRefuses, ledger_options)
