"""A stand-in for the 2.x ledger server that breaks one rule: its lease never ends, whatever --lease says
(issue 25, decision 4), so a call that hangs, or a server that dies mid-call, holds its key in progress for ever."""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server

CENTURY = 100 * 365 * 24 * 60 * 60.0  # as good as no bound


class NeverBoundsARunningRecord(ConfiguredOtherwise):
    """The layer, its store opened with a lease of a century."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, lease=CENTURY)


ledger_server.main(NeverBoundsARunningRecord)
