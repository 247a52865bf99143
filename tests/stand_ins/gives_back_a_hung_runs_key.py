"""A stand-in for the 2.x ledger server that breaks one rule: at a keyed run's deadline it stops the run but gives
its key back instead of recording the -32603 outcome (P31), so a retry past the deadline runs the tool again, though
the stopped run's effect is unknown, and may hang as long again."""

from mcp.shared.exceptions import MCPError

from mcp_idempotency import rules
from mcp_idempotency.keyed_run import DEADLINE_PASSED, KeyedRun
from mcp_idempotency.layer import Idempotency
from mcp_idempotency.outcomes import Outcome
from mcp_idempotency_demo import ledger_server


class GivenBackRun(KeyedRun):
    """A keyed run whose deadline frees its key rather than records that it was stopped."""

    async def stopped(self) -> tuple[Outcome, bool]:
        """The caller is told the run was stopped; nothing is recorded, and the key is free again."""
        await self.give_back()
        return MCPError(code=rules.INTERNAL_ERROR["code"], message=DEADLINE_PASSED.format(self.deadline)), True


class GivesBackAHungRunsKey(Idempotency):
    """The layer, its keyed runs giving their key back at their deadline."""

    def _keyed_run(self, key: str, store_key: str, fingerprint: bytes, owner: str, tool: str) -> KeyedRun:
        deadline = self._deadlines.get(tool, self.limits.deadline)
        return GivenBackRun(self._store, key, store_key, fingerprint, owner, deadline)


ledger_server.main(GivesBackAHungRunsKey)
