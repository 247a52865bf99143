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
from typing import Annotated, Any

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.extension import Extension
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams

EXTENSION_ID = "com.example.sep3182/idempotency"
META_KEY = "com.example.sep3182/idempotencyKey"
SETTINGS = {"maxKeyLength": 255, "retentionSeconds": 86400, "deadlineSeconds": 600, "leaseSeconds": 30}
KEY = "measured-key"
MARK = "x-mcp-idempotency-key"
ARGUMENT = "idempotency_key"
MarkedKey = Annotated[str | None, Field(json_schema_extra={MARK: True})]


def key_in(params: Any, placement: str) -> Any:
    """The key where `placement` puts it, in a params mapping (or a pydantic model dumped by alias)."""
    if hasattr(params, "model_dump"):
        params = params.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(params, dict):
        return None
    if placement == "params":
        return params.get("idempotencyKey")
    if placement == "argument":
        return (params.get("arguments") or {}).get(ARGUMENT)
    return (params.get("_meta") or {}).get(META_KEY)


class Advertised(Extension):
    """The stock way to advertise an extension (SEP-2133): settings() under capabilities.extensions."""

    identifier = EXTENSION_ID

    def __init__(self, seen: dict[str, Any], placement: str):
        self.seen, self.placement = seen, placement

    def settings(self) -> dict[str, Any]:
        return SETTINGS

    async def intercept_tool_call(self, params, ctx, call_next):
        for stage, where in (("intercept_tool_call", params), ("intercept_raw_params", dict(ctx.params or {}))):
            if key_in(where, self.placement) is not None:  # a keyless call (the unaware client's) erases nothing
                self.seen[stage] = key_in(where, self.placement)
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

    def charge(amount: int, ctx: Context) -> str:
        seen["handler_meta"] = (ctx.request_context.meta or {}).get(META_KEY)
        seen["handler_raw_params"] = key_in(dict(ctx.request_context.params or {}), placement)
        return f"charged {amount}"

    def charge_with_its_key(amount: int, ctx: Context, idempotency_key: MarkedKey = None) -> str:
        seen["handler_argument"] = idempotency_key
        return charge(amount, ctx)

    server.add_tool(charge_with_its_key if placement == "argument" else charge, name="charge")

    async with Client(server) as client:
        if placement == "argument":
            await client.call_tool("charge", {"amount": 1, ARGUMENT: KEY})  # the stock API: an argument like any
            sent = seen.get("middleware") == KEY
        elif placement == "meta":
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
        handled = KEY in (seen.get("handler_meta"), seen.get("handler_raw_params"), seen.get("handler_argument"))
        handled_how = seen.get("handler_meta") == KEY, seen.get("handler_raw_params") == KEY
        # A stock client that knows nothing of keys: it sends the call as a model or a caller gave it.
        middleware_saw = seen.pop("middleware", None) == KEY
        await client.call_tool("charge", {"amount": 1})
        unaware = seen.get("middleware")
        models_view = (await client.list_tools()).tools[0].input_schema.get("properties", {})
    where = ("tools", "idempotency") if placement == "params" else ("extensions", EXTENSION_ID)
    on_the_wire = (seen.get("capability_on_the_wire", {}).get(where[0]) or {}).get(where[1])
    kept_typed = (typed.get(where[0]) or {}).get(where[1])
    if placement == "argument":  # no capability: the marked property is the declaration; does the client keep it?
        listed = {tool.name: tool for tool in await listed_tools(server)}
        on_the_wire = kept_typed = listed["charge"].input_schema.get("properties", {}).get(ARGUMENT)
    return {
        "sent": sent,
        "middleware": middleware_saw,
        "intercept_tool_call": seen.get("intercept_tool_call") == KEY,
        "intercept_raw_params": seen.get("intercept_raw_params") == KEY,
        "handler": handled,
        "handler_how": "ctx.request_context.meta"
        if handled_how[0]
        else "ctx.request_context.params (raw)"
        if handled_how[1]
        else None,
        "unaware_client_sends_a_key": unaware is not None,
        "marked_property_in_the_stock_tool_list": bool((models_view.get(ARGUMENT) or {}).get(MARK)),
        "capability_on_the_wire": on_the_wire,
        "capability_typed": kept_typed,
    }


async def listed_tools(server: Any) -> list[mcp_types.Tool]:
    """The tool list a stock client gets, and would hand a model."""
    async with Client(server) as client:
        return (await client.list_tools()).tools


def backend(placement: str, arrived: dict[str, Any]) -> MCPServer:
    """The server behind a gateway: what reaches it before validation, in `arrived`."""

    async def wire(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            arrived["key"] = key_in(dict(ctx.params or {}), placement)
        return await call_next(ctx)

    server = MCPServer("behind", middleware=[wire])

    @server.tool()
    def charge(amount: int, idempotency_key: MarkedKey = None) -> str:
        return f"charged {amount}"

    return server


def gateway(behind: Client) -> Server[Any]:
    """A gateway on the stock SDK: a typed server whose tools/call re-sends what its typed params hold."""

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return await behind.list_tools()

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        # Everything the typed request keeps: the name, the arguments and _meta (a lost field is lost here).
        return await behind.call_tool(params.name, params.arguments, meta=params.meta)

    return Server("gateway", on_list_tools=list_tools, on_call_tool=call_tool)


async def through_a_gateway(placement: str) -> bool:
    """Does the key a client sends in `placement` reach the server behind a re-serialising gateway?"""
    arrived: dict[str, Any] = {}
    async with Client(backend(placement, arrived)) as behind, Client(gateway(behind)) as client:
        if placement == "params":  # sent as the wire has it (keyed_call.py), so that only the gateway can drop it
            keyed = KeyedCallParams(name="charge", arguments={"amount": 1}, idempotency_key=KEY)
            await client.session.send_request(KeyedCall(params=keyed), mcp_types.CallToolResult)
        elif placement == "meta":
            await client.call_tool("charge", {"amount": 1}, meta={META_KEY: KEY})
        else:
            await client.call_tool("charge", {"amount": 1, ARGUMENT: KEY})
    return arrived.get("key") == KEY


# SEP-2243's mark for a header; the SDK refuses it on a property that may be null, so this key is a string.
HeaderKey = Annotated[str, Field(json_schema_extra={"x-mcp-header": "Idempotency-Key", MARK: True})]
ORIGIN = "http://127.0.0.1:8000"  # served in process (ASGI): no port is opened; a loopback Host the SDK accepts


async def mirrored_to_a_header() -> dict[str, str]:
    """The Mcp-Param-* headers the stock client sends with a call whose key argument is also marked x-mcp-header,
    over Streamable HTTP on 2026-07-28: what a gateway reads without the body."""
    server = MCPServer("headers")

    @server.tool()
    def charge(amount: int, idempotency_key: HeaderKey = "") -> str:
        return f"charged {amount}"

    headers: dict[str, str] = {}

    async def record(request: httpx2.Request) -> None:
        if b'"tools/call"' in request.content:
            headers.update({name: value for name, value in request.headers.items() if name.startswith("mcp-param-")})

    app = server.streamable_http_app(stateless_http=True)
    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app), event_hooks={"request": [record]}) as http,
        Client(streamable_http_client(f"{ORIGIN}/mcp", http_client=http)) as client,
    ):
        await client.list_tools()  # the client learns the tool's header marks from its listing
        await client.call_tool("charge", {"amount": 1, ARGUMENT: KEY})
    return headers


async def main() -> None:
    rows = {placement: await measure(placement) for placement in ("params", "meta", "argument")}
    for placement, row in rows.items():
        row["through_a_gateway"] = await through_a_gateway(placement)
    headers = await mirrored_to_a_header()
    json.dump({"sdk": f"mcp {version('mcp')}", "rows": rows, "mirrored_headers": headers}, sys.stdout)


if __name__ == "__main__":
    anyio.run(main)
