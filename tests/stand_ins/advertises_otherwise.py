"""A stand-in for the 2.x ledger server that breaks one rule of its capability (C1, C2, P11'), chosen by
--capability: the layer runs as it should, but what it advertises is not an object, or a setting is not a positive
integer, or maxKeyLength is longer or shorter than the longest key it takes, or no window is advertised (the SHOULD
half). A client that trusts the capability is misled on exactly that one point. Configuration cannot do it: the one
setting reaches both the key check and the capability."""

import argparse
from collections.abc import Callable
from typing import Any, ClassVar

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server

Misstated = Callable[[dict[str, Any]], Any]

# --capability NAME -> what the layer advertises instead of the capability it keeps
MISSTATED: dict[str, Misstated] = {
    "no-object": lambda kept: True,  # "supported", as a flag
    "a-fractional-window": lambda kept: {**kept, "retentionSeconds": kept["retentionSeconds"] + 0.5},
    "a-longer-key-than-it-takes": lambda kept: {**kept, "maxKeyLength": kept["maxKeyLength"] + 1},
    "a-shorter-key-than-it-takes": lambda kept: {**kept, "maxKeyLength": kept["maxKeyLength"] - 1},
    "no-window": lambda kept: {name: value for name, value in kept.items() if name != "retentionSeconds"},
}


class AdvertisesOtherwise(Idempotency):
    """The layer, with capabilities.tools.idempotency as its `misstatement` (a --capability) makes it."""

    misstatement: ClassVar[str]

    def _advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        result = super()._advertised(result)
        tools = result["capabilities"]["tools"]
        tools["idempotency"] = MISSTATED[self.misstatement](tools["idempotency"])
        return result


parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0], allow_abbrev=False)
parser.add_argument("--capability", choices=MISSTATED, required=True, help="what is misstated")
chosen, ledger_options = parser.parse_known_args()
AdvertisesOtherwise.misstatement = chosen.capability
ledger_server.main(AdvertisesOtherwise, ledger_options)
