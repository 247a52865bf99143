"""A stand-in for the 2.x ledger server that breaks one rule: it fingerprints the arguments as Python's
json.dumps spells them, keys sorted, as a first implementation often does (E3: numbers of equal value compare
equal), so 100 and 100.0 are different requests, and a retry whose client wrote 1e2 is a conflict."""

import json
from typing import Any

from fingerprinted_otherwise import FingerprintedOtherwise

from mcp_idempotency_demo import ledger_server


class ComparesNumbersAsSpelled(FingerprintedOtherwise):
    """The layer, fingerprinting json.dumps(arguments, sort_keys=True): 1 is "1", 1.0 is "1.0"."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments")
        if not isinstance(arguments or {}, dict):
            return params  # not the SDK's shape: the layer leaves it to the SDK
        return {**params, "arguments": {"json.dumps": json.dumps(arguments or {}, sort_keys=True)}}


ledger_server.main(ComparesNumbersAsSpelled)
