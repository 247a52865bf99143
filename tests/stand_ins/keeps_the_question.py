"""A stand-in for the 2.x ledger server that breaks one rule: it keeps an input-required result (the question
charge_confirmed asks before it charges) as the key's outcome (P25 gives the claim back). The same keyed call
then gets the recorded question again, and so does the continuation, whose name and arguments are the same: the
tool never gets the answer, nothing is charged, and each retry is asked once more."""

from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency, Outcome
from mcp_idempotency_demo import ledger_server


class KeepsTheQuestion(Idempotency):
    """The layer, recording an input-required result like any other; -32042 (2025) is still not kept."""

    def _never_kept(self, outcome: Outcome) -> bool:
        return isinstance(outcome, MCPError) and super()._never_kept(outcome)


ledger_server.main(KeepsTheQuestion)
