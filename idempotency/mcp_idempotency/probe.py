"""Does this mcp build hand a tools/call's raw idempotencyKey to an Extension before the tool runs?

A build that hid the key would let a server look idempotent while it deduplicated
nothing, so a server checks, by sending one keyed call through the SDK in process,
before it serves: probed, not assumed.
"""

from importlib.metadata import version
from typing import Any

import anyio
import mcp_types
from mcp import Client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer

from .keyed_call import KeyedCall, KeyedCallParams

__all__ = ["sdk_hides_the_key", "why_the_key_is_hidden"]

SDK_HIDES_KEY = (
    "mcp {version} does not hand a tools/call's idempotencyKey to an Extension before the "
    "tool runs ({why}), so nothing would be deduplicated; install the SDK this layer was "
    "tested on: pip install ./idempotency"
)


class Watch(Extension):
    """An extension that notes what its tools/call interceptor sees of the key, as the layer reads it."""

    identifier = "com.example.sep3182/probe"

    def __init__(self, seen: list[str]):
        self.seen = seen

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self.seen.append(f"interceptor saw {(ctx.params or {}).get('idempotencyKey')!r}")
        return await call_next(ctx)


async def what_the_sdk_does_with_a_key() -> list[str]:
    """Send a keyed tools/call through the SDK, in process; list what saw the key, in order."""
    seen: list[str] = []
    probe = MCPServer("probe", extensions=[Watch(seen)])

    @probe.tool()
    def ran() -> str:
        seen.append("tool ran")
        return "ran"

    async with Client(probe, mode="legacy") as client:  # JSON-RPC messages over memory streams
        result = await client.session.send_request(
            KeyedCall(params=KeyedCallParams(name="ran", arguments={}, idempotency_key="probe")),
            mcp_types.CallToolResult,
        )
    return seen + ([] if result.is_error else ["call succeeded"])


def first_failure(error: BaseException) -> BaseException:
    """The first failure inside a task group's exception group, or the error itself."""
    inner = getattr(error, "exceptions", None)
    return first_failure(inner[0]) if isinstance(inner, tuple) and inner else error


async def why_the_key_is_hidden() -> str | None:
    """None if a raw key reaches an Extension before the tool runs and the call succeeds; else one line saying why."""
    expected = ["interceptor saw 'probe'", "tool ran", "call succeeded"]
    try:
        seen = await what_the_sdk_does_with_a_key()
    except Exception as error:  # a build that rejects the key, or moved what we rely on
        failure = first_failure(error)
        why = f"the probe failed: {type(failure).__name__}: {failure}".splitlines()[0]
    else:
        if seen == expected:
            return None
        why = "the probe saw: " + (", ".join(seen) or "nothing")
    return SDK_HIDES_KEY.format(version=version("mcp"), why=why)


def sdk_hides_the_key() -> str | None:
    """The same answer, for a program that has no event loop running yet (a server's main, before it serves)."""
    return anyio.run(why_the_key_is_hidden)
