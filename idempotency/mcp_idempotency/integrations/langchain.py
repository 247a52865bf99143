"""langchain-mcp-adapters, one key per tool call, in the argument the tool marks.

The adapter is pinned to the mcp 1.x SDK, so it cannot be installed beside this package's
mcp 2.x dependency, and it gives no way to set a call's _meta. This module needs neither: it
imports only the adapter and this package's SDK-free rules. Install it beside the adapter
with `pip install --no-deps mcp-idempotency`, and serve the tool with its key in a marked
argument (`Placement.ARGUMENT`):

    keys = KeyedArguments()
    client = MultiServerMCPClient({"ledger": {"url": url, "transport": "http"}}, tool_interceptors=[keys])
    tools = keys.model_facing(await client.get_tools())   # give the model these

`model_facing` takes the marked property out of the schema the model is shown, and notes it;
the interceptor then fills it with one key per tool call and sends that same request again
while its answer is lost or the server says the call is still running. A refused key, or no
answer after the last attempt, comes back as an error result, which the adapter shows the
model as the tool's error.
"""

from collections.abc import Awaitable, Callable

from langchain_core.tools import BaseTool
from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

from ..resend import (
    GaveUp,
    KeyRefused,
    Policy,
    ProtocolError,
    Reader,
    flattened,
    for_the_model,
    new_key,
    resend,
    text_of,
    timed,
)
from ..rules import marked_argument, without_key

__all__ = ["KeyedArguments"]


def raised_error(raised: BaseException) -> ProtocolError | None:
    """The JSON-RPC error the 1.x SDK raised, or None: the exception is not one."""
    return raised.error if isinstance(raised, McpError) else None


def rejection_in(result: MCPToolCallResult) -> ProtocolError | None:
    """The rejection a gateway turned into the tool's result, or None: it is the call's answer."""
    if not isinstance(result, CallToolResult):  # a message or command an interceptor made: no server's answer
        return None
    return flattened(result.isError, result.meta, text_of(result.content))


# How the 1.x SDK, under the adapter, shows a rejection, raised or flattened by a gateway.
MCP1: Reader[MCPToolCallResult] = Reader(raised_error, rejection_in)


class KeyedArguments:
    """A tool interceptor: each call of a tool that marks a key argument gets one key, resent until answered."""

    def __init__(self, policy: Policy = Policy()):
        self.policy = policy
        self.key_arguments: dict[str, str] = {}  # tool name -> the property its schema marks

    def model_facing(self, tools: list[BaseTool]) -> list[BaseTool]:
        """The tools to give a model: each marked key property noted, then taken out of the schema it is shown."""
        facing = []
        for tool in tools:
            schema = tool.args_schema  # the tool's inputSchema, as the adapter passes it on
            if isinstance(schema, dict) and (name := marked_argument(schema)) is not None:
                self.key_arguments[tool.name] = name
                tool = tool.model_copy(update={"args_schema": without_key(schema)})
            facing.append(tool)
        return facing

    async def __call__(
        self, request: MCPToolCallRequest, handler: Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]]
    ) -> MCPToolCallResult:
        """The call with its key in the marked argument, sent again while its answer is lost."""
        name = self.key_arguments.get(request.name)
        if name is None:  # the tool marks no key, or was not given to the model through model_facing
            return await handler(request)
        key = new_key()
        keyed = request.override(args={**request.args, name: key})
        try:
            return await resend(timed(lambda: handler(keyed), self.policy.timeout), MCP1, key, self.policy)
        except (KeyRefused, GaveUp) as failed:
            return CallToolResult(content=[TextContent(type="text", text=for_the_model(failed))], isError=True)
