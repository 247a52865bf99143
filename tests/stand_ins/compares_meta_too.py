"""A stand-in for the 2.x ledger server that breaks one rule: its fingerprint covers the request's _meta beside
the tool name and arguments (E1: equivalence is decided solely by those two), so a retry with another progress
token, or a trace id a proxy added, is a conflict instead of the replay."""

from typing import Any

from fingerprinted_otherwise import FingerprintedOtherwise

from mcp_idempotency_demo import ledger_server


class ComparesMetaToo(FingerprintedOtherwise):
    """The layer, fingerprinting the arguments with _meta folded in."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments")
        if not isinstance(arguments or {}, dict):
            return params  # not the SDK's shape: the layer leaves it to the SDK
        return {**params, "arguments": {**(arguments or {}), "_meta": params.get("_meta")}}


ledger_server.main(ComparesMetaToo)
