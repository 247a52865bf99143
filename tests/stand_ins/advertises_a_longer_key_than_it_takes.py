"""A stand-in for the 2.x ledger server that breaks one rule: it advertises maxKeyLength 512 but refuses keys past
255 (issue 25, decision 2): a client that trusts the capability sends a key the server calls invalid."""

from typing import Any

from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import Idempotency


class AdvertisesALongerKeyThanItTakes(Idempotency):
    """The layer, with a maxKeyLength it does not honour."""

    def advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        result = super().advertised(result)
        result["capabilities"]["tools"]["idempotency"]["maxKeyLength"] = 512
        return result


ledger_server.main(AdvertisesALongerKeyThanItTakes)
