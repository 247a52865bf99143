"""A stand-in for the 2.x ledger server that breaks one position: each principal's share is the whole store
(P9': each principal holds at most its share of live records), so one principal sending new keys fills the
store, and every other principal's new keys are refused until her records expire. Only the shared bound
(P9) is left. Run it as the ledger server over HTTP with --issuer, as the kit's authorised targets are.
"""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server


class BoundsOnlyTheWholeStore(ConfiguredOtherwise):
    """The layer, configured with a share as large as the store's bound."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, max_records_per_principal=limits.max_records)


ledger_server.main(BoundsOnlyTheWholeStore)
