"""A stand-in for the 2.x ledger server that breaks one rule: its fingerprint ignores the tool name (E1: the same
request is the same tool and equivalent arguments), so a key used on charge_guarded replays on charge_unguarded
with the same arguments, and the second tool never runs. Only a kit given a second tool (--other-tool) sees it."""

from typing import Any

from mcp_idempotency import rules
from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Held

CHARGE_TOOLS = ("charge_guarded", "charge_unguarded")  # the ledger's two tools that take the same arguments


class IgnoresTheToolName(Idempotency):
    """The layer, taking a record made by either charge tool with these arguments as this very request."""

    def answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        arguments = ctx.params.get("arguments")
        if any(rules.fingerprint(tool, arguments) == held.fingerprint for tool in CHARGE_TOOLS):
            fingerprint = held.fingerprint
        return super().answer(held, fingerprint, key, ctx)


ledger_server.main(IgnoresTheToolName)
