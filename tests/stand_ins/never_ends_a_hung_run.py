"""A stand-in for the 2.x ledger server that breaks one rule: it advertises a deadline but never keeps it (P31),
so a keyed call whose tool hangs holds its key "in progress" for as long as the tool runs, past the advertised
deadlineSeconds and leaseSeconds, and every retry is told to wait."""

import math

from mcp_idempotency.keyed_run import KeyedRun
from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class NeverEndsAHungRun(Idempotency):
    """The layer, its keyed runs given no deadline at all."""

    def _keyed_run(self, key: str, store_key: str, fingerprint: bytes, owner: str, tool: str) -> KeyedRun:
        return KeyedRun(self._store, key, store_key, fingerprint, owner, math.inf)


ledger_server.main(NeverEndsAHungRun)
