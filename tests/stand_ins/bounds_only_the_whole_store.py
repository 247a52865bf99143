"""A stand-in for the 2.x ledger server that breaks one position: each principal's share is the whole store
(P9': each principal holds at most its share of live records), so one principal sending new keys fills the
store, and every other principal's new keys are refused until her records expire. Only the shared bound
(P9) is left. Run it as the ledger server over HTTP with --issuer, as the kit's authorised targets are.
"""

from dataclasses import replace
from typing import Any

from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Limits


class BoundsOnlyTheWholeStore(Idempotency):
    """The layer, configured with a share as large as the store's bound."""

    def __init__(self, store: str, *, limits: Limits = Limits(), **settings: Any):
        super().__init__(store, limits=replace(limits, max_records_per_principal=limits.max_records), **settings)


ledger_server.main(BoundsOnlyTheWholeStore)
