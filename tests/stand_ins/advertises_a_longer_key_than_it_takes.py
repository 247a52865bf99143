"""A stand-in for the 2.x ledger server that breaks one rule: it advertises a maxKeyLength one character past
the longest key it takes (issue 25, decision 2): a client that trusts the capability sends a key the server
calls invalid. Configuration cannot do it, since the one setting reaches both the key check and the capability."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class AdvertisesALongerKeyThanItTakes(Idempotency):
    """The layer, with a maxKeyLength it does not honour."""

    def advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        result = super().advertised(result)
        result["capabilities"]["tools"]["idempotency"]["maxKeyLength"] = self.limits.max_key_length + 1
        return result


ledger_server.main(AdvertisesALongerKeyThanItTakes)
