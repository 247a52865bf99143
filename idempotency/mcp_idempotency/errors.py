"""The one base class of every exception this package raises to its users, and the start-up refusals.

It imports nothing, not even the MCP SDK, so the SDK-free modules (the rules, the stores, the retry
loop) derive their exceptions from it too: `except IdempotencyError` catches whatever the package
raises, and each exception keeps the built-in base (ValueError, RuntimeError) it had before.
"""

__all__ = ["IdempotencyError", "InvalidSetting", "ServerMisconfigured"]


class IdempotencyError(Exception):
    """Whatever this package raises to its users derives from this."""


class InvalidSetting(IdempotencyError, ValueError):
    """Raised as Limits, Idempotency or a store URL is given a value that cannot work (a window of zero, an
    unknown store); the operator sees one line that names the setting and the fix, and nothing was started."""


class ServerMisconfigured(IdempotencyError, RuntimeError):
    """Raised as the server starts when it cannot serve as set up (the layer not wired into MCPServer, an SDK that
    hides the key, deadlines= naming no tool, a pooled PostgreSQL database without the store's settings), or when
    the layer is used while no server runs it: the operator sees one line naming the fix. Raised on a call (no
    verified token behind authorisation), it reaches the client only as an internal error."""
