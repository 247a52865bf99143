"""A pydantic-ai agent with the integration's hook, on FunctionModel: the model calls charge_guarded once, its
answer is lost, and the model is shown only the tools and the tool's return (a JSON line on stdout).

    python pydantic_ai_driver.py URL ATTEMPTS      (in .venv-agents; the server's charge outlasts one attempt)
"""

import json
import sys
from typing import Any

import anyio
import fastmcp
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcp_idempotency.integrations.pydantic_ai import keyed_calls
from mcp_idempotency.resend import Policy

# An attempt shorter than the server's charge, so the first answer is lost; as many attempts as the test says.
ATTEMPT = Policy(timeout=1.0, attempts=int(sys.argv[2]))
shown: list[Any] = []  # every tool definition and tool return the model was handed


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that charges 7 once, then reports what the tool returned."""
    shown.extend(
        tool.parameters_json_schema | {"name": tool.name, "description": tool.description}
        for tool in info.function_tools
    )
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("charge_guarded", {"amount": 7})])
    shown.extend(part.model_response_str() for part in returns)
    return ModelResponse(parts=[TextPart(returns[-1].model_response_str())])


async def main(url: str) -> None:
    """Run the agent once against the server at `url`; print what its model saw and the ledger."""
    toolset = MCPToolset(url, process_tool_call=keyed_calls(ATTEMPT))
    run = await Agent(FunctionModel(model), toolsets=[toolset]).run("Charge 7.")
    async with fastmcp.Client(url) as client:
        ledger = await client.call_tool("get_balance", {})
    print(json.dumps({"shown": shown, "result": run.output, "charges": ledger.data["charges"]}))


anyio.run(main, sys.argv[1])
