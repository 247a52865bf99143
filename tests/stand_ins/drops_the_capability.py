"""A stand-in for the 2.x ledger server that breaks one rule: it deduplicates, but never declares
capabilities.tools.idempotency (C1), so a careful client cannot know it may rely on keys."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class DropsTheCapability(Idempotency):
    """The layer, with the capability left out of server/discover and initialize."""

    def _advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        return result


ledger_server.main(DropsTheCapability)
