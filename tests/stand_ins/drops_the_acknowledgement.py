"""A stand-in for the 2.x ledger server that breaks one rule: a keyed call's result does not carry the
acknowledgement (P33: every result of a claimed keyed call names its key in `_meta`, recorded with it, so a replay
carries it as the first answer did), so a client behind a gateway cannot tell an honoured key from an ignored one.
--from replays drops it from replays only, the first answer keeping it (default: from every answer)."""

import argparse
from collections.abc import Mapping
from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import ACKNOWLEDGEMENT
from mcp_idempotency_demo import ledger_server


def unacknowledged(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result, its `_meta` without the acknowledgement (and no `_meta` at all if nothing else was there)."""
    meta = {name: value for name, value in (result.get("_meta") or {}).items() if name != ACKNOWLEDGEMENT}
    kept = {name: value for name, value in result.items() if name != "_meta"}
    return {**kept, "_meta": meta} if meta else kept


class DropsItFromEveryAnswer(Idempotency):
    """The layer, every keyed result it answers, first or replayed, stripped of the acknowledgement."""

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Any, call_next: CallNext
    ) -> HandlerResult:
        answer = await super().intercept_tool_call(params, ctx, call_next)
        return unacknowledged(answer) if isinstance(answer, Mapping) else answer


class DropsItFromReplays(Idempotency):
    """The layer, its replays stripped of the acknowledgement the first answer carried."""

    def _replay(self, outcome: str, revision: str, declared: Mapping[str, Any]) -> dict[str, Any]:
        return unacknowledged(super()._replay(outcome, revision, declared))


parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0], allow_abbrev=False)
parser.add_argument("--from", dest="dropped_from", choices=["replays"], help="replays only (default: every answer)")
chosen, ledger_options = parser.parse_known_args()
ledger_server.main(DropsItFromReplays if chosen.dropped_from else DropsItFromEveryAnswer, ledger_options)
