"""A stand-in for the 2.x ledger server that breaks one rule: besides its placement's key (P26), it takes a key
from the other placement when its own carries none, so a client's `_meta` member, or a `params` field a proxy
passed along, deduplicates a call the client sent without a key in the place the server advertises (P1 for
that placement). It does so in either placement (--placement meta)."""

from typing import Any

from fingerprinted_otherwise import FingerprintedOtherwise

from mcp_idempotency import rules
from mcp_idempotency.rules import META_KEY, Placement
from mcp_idempotency_demo import ledger_server


class ReadsTheKeyInBothPlaces(FingerprintedOtherwise):
    """The layer, shown the other placement's key where its own is absent."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        other = Placement.META if self.placement is Placement.PARAMS else Placement.PARAMS
        key, meta = rules.sent_key(params, other), params.get("_meta")
        if rules.sent_key(params, self.placement) is not None or key is None or not isinstance(meta or {}, dict):
            return params
        if self.placement is Placement.PARAMS:
            return {**params, "idempotencyKey": key}
        return {**params, "_meta": {**(meta or {}), META_KEY: key}}


ledger_server.main(ReadsTheKeyInBothPlaces)
