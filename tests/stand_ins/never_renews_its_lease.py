"""A stand-in for the 2.x ledger server that breaks one rule: it never renews the lease of a running call, so a
retry sent once the lease has passed takes a live run over and runs the tool a second time."""

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class NeverRenewsItsLease(Idempotency):
    """The layer, its claims left to lapse while their tools still run."""

    async def keep_alive(self) -> None:
        """No renewal at all."""


ledger_server.main(NeverRenewsItsLease)
