"""The client half inside the agent frameworks: each tool call the model makes gets one key, resent on a lost answer.

Each module is an optional extra and imports its framework; none of them is imported here.

    mcp_idempotency.integrations.fastmcp        fastmcp's Client: call_tool           [fastmcp]
    mcp_idempotency.integrations.pydantic_ai    MCPToolset(process_tool_call=keyed_calls())   [pydantic-ai]
    mcp_idempotency.integrations.openai_agents  KeyedMCPServerStreamableHttp            [openai-agents]
    mcp_idempotency.integrations.langchain      KeyedArguments, a tool interceptor (mcp 1.x: no extra)

In every one the key is minted by the integration when the model's tool call reaches it, the
same request is sent again while its answer is lost or the server says it is still running,
and the model sees neither the key nor the retries: only the call's answer, or a tool error
saying the call was refused or went unanswered.
"""
