"""A stand-in for the 2.x ledger server that breaks one rule: over HTTP with --issuer, a tools/call that carries
an idempotencyKey skips the per-tool scope check, as if holding the key were authority (K3, P22: a replay
passes the authorisation in force when it is made). A token narrowed since the original gets its result.

Not a subclass of the layer: the scope check is the HTTP middleware's (mcp_idempotency/auth.py), so this
server is started with a subclass of that gate, through ledger_server.main's `gate`.
"""

from pydantic_core import from_json

from mcp_idempotency import auth
from mcp_idempotency_demo import ledger_server


class TrustsTheKey(auth.ScopeGate):
    """The scope gate, asking no scope of a keyed tools/call."""

    def scope_needed(self, body: bytes) -> str | None:
        try:
            message = from_json(body)
        except ValueError:
            message = None
        if (
            isinstance(message, dict)
            and isinstance(message.get("params"), dict)
            and message["params"].get("idempotencyKey") is not None
        ):
            return None
        return super().scope_needed(body)


ledger_server.main(gate=TrustsTheKey)
