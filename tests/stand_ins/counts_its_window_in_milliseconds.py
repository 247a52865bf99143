"""A stand-in for the 2.x ledger server that breaks one rule: it reads --retention as milliseconds (R1, R5: a key
replays inside its window), so a one-second window forgets a key a millisecond after its outcome. Its capability
says the window it keeps, as the one setting makes it; a day's default still outlasts any check but the window's."""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server


class CountsItsWindowInMilliseconds(ConfiguredOtherwise):
    """The layer, its store keeping a thousandth of the window the command line gives."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, retention=limits.retention / 1000)


ledger_server.main(CountsItsWindowInMilliseconds)
