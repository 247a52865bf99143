"""What a keyed tools/call ends in, as the client is told it and as the store keeps it.

The layer (which reads keys and runs the tool) and the keyed run (which owns a claim until
its outcome is kept) both speak in these terms; neither reaches into the other for them.
"""

from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from pydantic_core import to_json

from . import rules

__all__ = []

Outcome = dict[str, Any] | MCPError  # what a tools/call produced: a result, or a JSON-RPC error


def rejection(kind: str, key: str | None = None, detail: str | None = None) -> MCPError:
    """The JSON-RPC error for an idempotency rejection; never recorded."""
    return MCPError(**rules.rejection(kind, key, detail))


def internal_error() -> MCPError:
    """What anything unexpected becomes: a fixed message, no exception text leaked to the client."""
    return MCPError(**rules.INTERNAL_ERROR)


def recorded(outcome: Outcome, declared: Mapping[str, Any] | None = None) -> str:
    """An outcome as the store keeps it: an error; or a result, with the capabilities its request declared."""
    if isinstance(outcome, MCPError):
        return to_json({"error": outcome.error.model_dump(exclude_none=True)}).decode()
    return to_json({"result": outcome, **({"declared": declared} if declared else {})}).decode()


class AsksAgain(Exception):
    """An outcome that asks the client to send the request again (URL elicitation, input required); kept,
    it would answer that request for the whole window, so it is never recorded and the claim is given back."""

    def __init__(self, outcome: Outcome):
        super().__init__("the outcome asks for the request again")
        self.outcome = outcome
