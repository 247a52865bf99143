"""A stand-in for the 2.x ledger server that breaks one rule: a keyed run is not shielded (P7), so a client that
cancels, or closes its SSE response stream mid-call (2026-07-28 makes that a cancel), stops the charge half way.
Its retry, sent at once, is not told the call is in progress: it finds the key given back and runs anew, or held
until its lease ends, with no outcome to replay."""

from mcp_idempotency.keyed_run import KeyedRun, Work
from mcp_idempotency.layer import Idempotency, Outcome
from mcp_idempotency_demo import ledger_server


class StopsItsRunWhenTheStreamCloses(Idempotency):
    """The layer, running each keyed call in its caller's own task, which any cancel reaches (its lease
    renewed as any run's)."""

    async def _run_once(self, run: KeyedRun, work: Work) -> Outcome:
        return await self._runs.run(run, work)


ledger_server.main(StopsItsRunWhenTheStreamCloses)
