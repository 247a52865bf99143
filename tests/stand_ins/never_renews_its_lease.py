"""A stand-in for the 2.x ledger server that breaks one rule: it never renews the lease of a running call, so a
retry sent once the lease has passed takes a live run over and runs the tool a second time."""

from mcp_idempotency.keyed_run import KeyedRun
from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class LapsingRun(KeyedRun):
    """A keyed run whose claim is left to lapse while its tool still runs."""

    async def renew_lease(self) -> None:
        """No renewal at all."""


class NeverRenewsItsLease(Idempotency):
    """The layer, its claims left to lapse while their tools still run."""

    def _keyed_run(self, key: str, store_key: str, fingerprint: bytes, owner: str, tool: str) -> KeyedRun:
        return LapsingRun(self._store, key, store_key, fingerprint, owner, self.limits.deadline)


ledger_server.main(NeverRenewsItsLease)
