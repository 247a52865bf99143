"""A stand-in for the 2.x ledger server that breaks one rule: its records outlive any window, whatever --retention
says (R1, P8: state is kept for a bounded window), so a key replays for a century and the store only fills."""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server

CENTURY = 100 * 365 * 24 * 60 * 60.0  # as good as no window


class NeverForgetsAKey(ConfiguredOtherwise):
    """The layer, its store opened with a retention of a century."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, retention=CENTURY)


ledger_server.main(NeverForgetsAKey)
