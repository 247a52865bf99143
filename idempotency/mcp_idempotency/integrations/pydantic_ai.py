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

from ..resend import NoAnswer, Policy, ProtocolError, Refused, for_the_model, resend
from . import keyed

__all__ = ["keyed_calls"]


def protocol_error(raised: BaseException) -> ProtocolError | None:
    """The JSON-RPC error behind the toolset's ModelRetry, which is how it reports every protocol error."""
    cause = raised.__cause__ if isinstance(raised, ModelRetry) else raised
    return keyed.protocol_error(cause) if cause is not None else None


def keyed_calls(policy: Policy = Policy()) -> ProcessToolCallback:
    """The `process_tool_call` hook: each tool call the model makes sent with one key until answered."""

    async def process_tool_call(
        ctx: RunContext[Any], call_tool: CallToolFunc, name: str, arguments: dict[str, Any]
    ) -> ToolResult:
        """One tool call of the model's, keyed, and sent again while its answer is lost."""
        meta = keyed.key_meta()
        try:
            return await resend(lambda: call_tool(name, arguments, metadata=meta), protocol_error, policy)
        except (Refused, NoAnswer) as failed:
            raise ToolFailed(for_the_model(failed)) from None

    return process_tool_call
