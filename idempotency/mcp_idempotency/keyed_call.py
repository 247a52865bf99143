"""What a client on mcp 2.x sends to use SEP-3182: a tools/call with the key beside `arguments`.

The SDK's own CallToolRequestParams has no `idempotencyKey` and drops it; these
subclasses declare it, so `client.session.send_request(KeyedCall(...), CallToolResult)`
puts it on the wire. Nothing here needs a server.
"""

import mcp_types

__all__ = ["KeyedCall", "KeyedCallParams"]


class KeyedCallParams(mcp_types.CallToolRequestParams):
    """tools/call params with the key beside `arguments`: 2.x's own model would drop it."""

    idempotency_key: str | None = None  # the SDK's camelCase aliases put it on the wire as idempotencyKey


class KeyedCall(mcp_types.CallToolRequest):
    """A tools/call request that carries KeyedCallParams."""

    params: KeyedCallParams
