"""What the integrations on the mcp 2.x SDK share: the key in request _meta, and the JSON-RPC error an exception is."""

from typing import Any

from mcp.shared.exceptions import MCPError

from ..client import new_key
from ..resend import ProtocolError
from ..rules import META_KEY


def key_meta() -> dict[str, Any]:
    """The _meta of one logical tool call: a fresh key, where a server advertising the extension reads it."""
    return {META_KEY: new_key()}


def protocol_error(raised: BaseException) -> ProtocolError | None:
    """The JSON-RPC error the SDK raised, or None: the exception is not one."""
    return raised.error if isinstance(raised, MCPError) else None
