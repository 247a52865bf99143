"""A stand-in for the 2.x ledger server that breaks one rule: `"idempotencyKey": null` is taken as the key
"null" (W1, P2: an absent or null key is no key), so every call that sends null after the first replays it."""

from collections.abc import Mapping
from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class TakesANullKeyAsAKey(Idempotency):
    """The layer, with a null key spelled out as a string before it is read."""

    def _key_of(self, params: Mapping[str, Any]) -> str | None:
        if "idempotencyKey" in params and params["idempotencyKey"] is None:
            params = {**params, "idempotencyKey": "null"}
        return super()._key_of(params)


ledger_server.main(TakesANullKeyAsAKey)
