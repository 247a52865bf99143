"""A stand-in for the 2.x ledger server that breaks one rule: its fingerprint ignores the tool name (E1: the same
request is the same tool and equivalent arguments), so a key used on charge_guarded replays on charge_unguarded
with the same arguments, and the second tool never runs. Only a kit given a second tool (--other-tool) sees it."""

from typing import Any

from fingerprinted_otherwise import FingerprintedOtherwise

from mcp_idempotency_demo import ledger_server


class IgnoresTheToolName(FingerprintedOtherwise):
    """The layer, fingerprinting the arguments alone."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**params, "name": "any tool"}


ledger_server.main(IgnoresTheToolName)
