"""pydantic-ai's MCPToolset, one key per tool call: `pip install 'mcp-idempotency[pydantic-ai]'`.

    toolset = MCPToolset("http://127.0.0.1:8000/mcp", process_tool_call=keyed_calls())
    agent = Agent(model, toolsets=[toolset])

The toolset turns a timeout into `ModelRetry`, and the model's retry is a new tool call: a
key minted per call would change, and the tool run twice. `keyed_calls` is the toolset's
`process_tool_call` hook: it mints the call's key, puts it in _meta, and sends the same
request again on a lost answer or an in-progress rejection, before the model hears of it.
A refused key, or no answer after the last attempt, reaches the model as `ToolFailed`: a
tool error that does not invite the same call again.
"""

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.mcp import CallToolFunc, ProcessToolCallback, ToolResult

from ..client import MCP2
from ..resend import GaveUp, KeyRefused, Policy, ProtocolError, Reader, flattened, for_the_model, new_key, resend, timed
from ..rules import META_KEY

__all__ = ["keyed_calls"]


def raised_error(raised: BaseException) -> ProtocolError | None:
    """The JSON-RPC error behind the toolset's ModelRetry, which is how it reports every protocol error and every
    isError result; of the latter it passes on only the text, so a rejection a gateway flattened is read there."""
    if not isinstance(raised, ModelRetry):
        return MCP2.error(raised)
    if raised.__cause__ is not None:
        return MCP2.error(raised.__cause__)
    return flattened(True, None, raised.message)  # no _meta came with it, so no acknowledgement


# The toolset raises every rejection: a result it returns is the tool's answer.
READER: Reader[ToolResult] = Reader(raised_error, lambda answer: None)


def keyed_calls(policy: Policy = Policy()) -> ProcessToolCallback:
    """The `process_tool_call` hook: each tool call the model makes sent with one key until answered."""

    async def process_tool_call(
        ctx: RunContext[Any], call_tool: CallToolFunc, name: str, arguments: dict[str, Any]
    ) -> ToolResult:
        """One tool call of the model's, keyed, and sent again while its answer is lost."""
        key = new_key()
        meta = {META_KEY: key}
        try:
            return await resend(
                timed(lambda: call_tool(name, arguments, metadata=meta), policy.timeout), READER, key, policy
            )
        except (KeyRefused, GaveUp) as failed:
            raise ToolFailed(for_the_model(failed)) from None

    return process_tool_call
