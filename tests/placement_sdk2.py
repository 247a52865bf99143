"""P26 measured on mcp 2.x (run by the mcp 2.x interpreter): what survives of each placement, through stock API only.

    .venv-2x/bin/python tests/placement_sdk2.py        # one JSON object on stdout

For each placement it sends one keyed tools/call with the stock `Client` to a stock
`MCPServer` over the SDK's in-memory transport (JSON-RPC messages, as a transport
writes them) and reads: what the server received before validation (a middleware),
what an `Extension.intercept_tool_call` and a tool handler get, and what the client's
typed `server_capabilities` keeps of a capability the server put on the wire.
tests/placement_table.py turns this into docs/placement.md's table.
"""

import json
import sys
from importlib.metadata import version
from typing import Any

import anyio
import mcp_types
from mcp import Client
from mcp.server.extension import Extension
from mcp.server.mcpserver import Context, MCPServer

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams

EXTENSION_ID = "com.example.sep3182/idempotency"
META_KEY = "com.example.sep3182/idempotencyKey"
SETTINGS = {"maxKeyLength": 255, "retentionSeconds": 86400}
KEY = "measured-key"


def key_in(params: Any, placement: str) -> Any:
    """The key where `placement` puts it, in a params mapping (or a pydantic model dumped by alias)."""
    if hasattr(params, "model_dump"):
        params = params.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(params, dict):
        return None
    if placement == "params":
        return params.get("idempotencyKey")
    return (params.get("_meta") or {}).get(META_KEY)


class Advertised(Extension):
    """The stock way to advertise an extension (SEP-2133): settings() under capabilities.extensions."""

    identifier = EXTENSION_ID

    def __init__(self, seen: dict[str, Any], placement: str):
        self.seen, self.placement = seen, placement

    def settings(self) -> dict[str, Any]:
        return SETTINGS

    async def intercept_tool_call(self, params, ctx, call_next):
        self.seen["intercept_tool_call"] = key_in(params, self.placement)
        self.seen["intercept_raw_params"] = key_in(dict(ctx.params or {}), self.placement)
        return await call_next(ctx)


async def measure(placement: str) -> dict[str, Any]:
    """One keyed call in `placement`: what each stage saw of the key, and what the client saw of the capability."""
    seen: dict[str, Any] = {}

    async def wire(ctx: Any, call_next: Any) -> Any:
        """What arrived, before validation; and the SEP's capability, which the SDK has no API for, added raw."""
        if ctx.method == "tools/call":
            seen["middleware"] = key_in(dict(ctx.params or {}), placement)
        result = await call_next(ctx)
        if placement == "params" and ctx.method in ("server/discover", "initialize"):
            result.setdefault("capabilities", {}).setdefault("tools", {})["idempotency"] = SETTINGS
        if ctx.method in ("server/discover", "initialize"):
            seen["capability_on_the_wire"] = json.loads(json.dumps(result.get("capabilities", {})))
        return result

    server = MCPServer("placement", middleware=[wire], extensions=[Advertised(seen, placement)])

    @server.tool()
    def charge(amount: int, ctx: Context) -> str:
        seen["handler_meta"] = (ctx.request_context.meta or {}).get(META_KEY)
        seen["handler_raw_params"] = key_in(dict(ctx.request_context.params or {}), placement)
        return f"charged {amount}"

    async with Client(server) as client:
        if placement == "meta":
            await client.call_tool("charge", {"amount": 1}, meta={META_KEY: KEY})  # the stock API
            sent = seen.get("middleware") == KEY
        else:
            # The stock params model has no idempotencyKey: given as an extra member, is it sent?
            stock = mcp_types.CallToolRequestParams(name="charge", arguments={"amount": 1}, idempotencyKey=KEY)
            await client.session.send_request(mcp_types.CallToolRequest(params=stock), mcp_types.CallToolResult)
            sent = seen.pop("middleware", None) == KEY
            # The way in, measured with the key on the wire: a params model that declares it (keyed_call.py).
            keyed = KeyedCallParams(name="charge", arguments={"amount": 1}, idempotency_key=KEY)
            await client.session.send_request(KeyedCall(params=keyed), mcp_types.CallToolResult)
        typed = client.server_capabilities.model_dump(by_alias=True, exclude_none=True)
    where = ("tools", "idempotency") if placement == "params" else ("extensions", EXTENSION_ID)
    return {
        "sent": sent,
        "middleware": seen.get("middleware") == KEY,
        "intercept_tool_call": seen.get("intercept_tool_call") == KEY,
        "intercept_raw_params": seen.get("intercept_raw_params") == KEY,
        "handler": KEY in (seen.get("handler_meta"), seen.get("handler_raw_params")),
        "handler_how": "ctx.request_context.meta"
        if seen.get("handler_meta") == KEY
        else "ctx.request_context.params (raw)"
        if seen.get("handler_raw_params") == KEY
        else None,
        "capability_on_the_wire": (seen.get("capability_on_the_wire", {}).get(where[0]) or {}).get(where[1]),
        "capability_typed": (typed.get(where[0]) or {}).get(where[1]),
    }


async def main() -> None:
    rows = {placement: await measure(placement) for placement in ("params", "meta")}
    json.dump({"sdk": f"mcp {version('mcp')}", "rows": rows}, sys.stdout)


if __name__ == "__main__":
    anyio.run(main)
