"""fastmcp's Client, one key per logical tool call: `pip install 'mcp-idempotency[fastmcp]'`.

    async with fastmcp.Client("http://127.0.0.1:8000/mcp") as client:
        result = await call_tool(client, "charge", {"amount": 7}, policy=Policy(timeout=10))

fastmcp sends a call once and raises on a timeout. `call_tool` puts one key in the call's
_meta and sends that same request again, by the client half's own loop (`mcp_idempotency.resend`):
after a timeout, a lost connection, or an answer that says the call is still running, until the
key can no longer be in progress. It raises `KeyRefused` when the server refuses the key for
good and `GaveUp` (with the key and when it was first sent) after its last attempt.
"""

from typing import Any

import mcp_types
from fastmcp import Client

from ..client import MCP2
from ..resend import Policy, new_key, resend, timed
from ..rules import META_KEY

__all__ = ["call_tool"]


async def call_tool(
    client: Client[Any], name: str, arguments: dict[str, Any], *, policy: Policy = Policy()
) -> mcp_types.CallToolResult:
    """One logical tools/call through fastmcp's `client`: one key, the very same request until it is answered."""
    key = new_key()
    meta = {META_KEY: key}
    return await resend(
        timed(lambda: client.call_tool_mcp(name, arguments, meta=meta), policy.timeout), MCP2, key, policy
    )
