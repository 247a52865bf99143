"""A stand-in for the 2.x ledger server that breaks one rule: an off-by-one keeps a completed record one second less
than --retention says (R1, R5: a key replays inside its window), so a one-second window forgets the key as soon as its
outcome is recorded, and the retry at once runs the tool again. A day's window, the default, loses only a second."""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server

NO_TIME = 1e-9  # what is left of a one-second window: Limits refuses 0, and a retry comes microseconds later at best


class EndsItsWindowASecondEarly(ConfiguredOtherwise):
    """The layer, its store keeping a completed record one second less than the window the command line gives."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, retention=max(limits.retention - 1, NO_TIME))


ledger_server.main(EndsItsWindowASecondEarly)
