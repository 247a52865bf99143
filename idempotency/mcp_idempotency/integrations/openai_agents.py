"""The OpenAI Agents SDK's MCP server, one key per tool call: `pip install 'mcp-idempotency[openai-agents]'`.

    server = KeyedMCPServerStreamableHttp({"url": "http://127.0.0.1:8000/mcp"}, policy=Policy(timeout=10))
    agent = Agent(name="clerk", mcp_servers=[server])

The SDK asks its `tool_meta_resolver` once per tool call: here it mints the call's key, in
_meta. Its own retry (`max_retry_attempts`) resends every failure alike, a refused key
included; this server's `call_tool` resends that same request only while the answer is lost
or the server says the call is still running. A refused key, or no answer after the last
attempt, comes back as an error result, whose text the SDK shows the model (an exception would reach it
as "An error occurred while running the tool. Please try again.", the opposite of what it should do).
"""

from typing import Any

from agents.mcp import MCPServerStreamableHttp, MCPServerStreamableHttpParams
from agents.mcp.util import MCPToolMetaContext
from mcp_types import CallToolResult, TextContent

from ..client import MCP2
from ..resend import GaveUp, KeyRefused, Policy, for_the_model, new_key, resend, timed
from ..rules import META_KEY

__all__ = ["KeyedMCPServerStreamableHttp", "key_per_call"]


def key_per_call(context: MCPToolMetaContext) -> dict[str, Any]:
    """The `tool_meta_resolver`: a fresh key for each tool call the model makes."""
    return {META_KEY: new_key()}


class KeyedMCPServerStreamableHttp(MCPServerStreamableHttp):
    """A Streamable HTTP MCP server whose tool calls each carry one key, resent until answered."""

    def __init__(self, params: MCPServerStreamableHttpParams, *, policy: Policy = Policy(), **options: Any):
        # The session's read timeout (5 s unless set) would cut every attempt short of the policy's.
        options.setdefault("client_session_timeout_seconds", policy.timeout)
        super().__init__(params, tool_meta_resolver=key_per_call, **options)
        self.policy = policy

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        """The tool call with the key its resolver gave it, sent again while its answer is lost."""
        send = super().call_tool
        if meta is None or META_KEY not in meta:  # a call made outside the SDK's tool path: no key, sent once
            return await send(tool_name, arguments, meta)
        try:
            return await resend(
                timed(lambda: send(tool_name, arguments, meta), self.policy.timeout), MCP2, meta[META_KEY], self.policy
            )
        except (KeyRefused, GaveUp) as failed:  # an error result, whose text the SDK hands the model as it is
            return CallToolResult(content=[TextContent(type="text", text=for_the_model(failed))], is_error=True)
