"""langchain-mcp-adapters with the integration's interceptor: charge_guarded called once as an agent's tool node
calls it, its answer lost; the tool schema the model is given and the ToolMessage it gets (a JSON line on stdout).

    python langchain_driver.py URL ATTEMPTS      (in .venv-langchain; the server's argument placement, its charge slow)
"""

import json
import sys

import anyio
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient

from mcp_idempotency.integrations.langchain import KeyedArguments
from mcp_idempotency.resend import Policy

# An attempt shorter than the server's charge, so the first answer is lost; as many attempts as the test says.
ATTEMPT = Policy(timeout=1.0, attempts=int(sys.argv[2]))


def tool_call(name: str, arguments: dict) -> dict:
    """A tool call as a model's message carries it, the way an agent's tool node hands it to the tool."""
    return {"type": "tool_call", "id": f"call-{name}", "name": name, "args": arguments}


async def main(url: str) -> None:
    """Charge 7 through the model-facing tool; print its schema, the model's ToolMessage and the ledger."""
    keys = KeyedArguments(ATTEMPT)
    client = MultiServerMCPClient({"ledger": {"url": url, "transport": "http"}}, tool_interceptors=[keys])
    tools = {tool.name: tool for tool in keys.model_facing(await client.get_tools())}
    message = await tools["charge_guarded"].ainvoke(tool_call("charge_guarded", {"amount": 7}))
    ledger = await tools["get_balance"].ainvoke(tool_call("get_balance", {}))
    print(
        json.dumps(
            {
                "shown": [convert_to_openai_tool(tool) for tool in tools.values()],
                "result": message.text,
                "charges": json.loads(ledger.text)["charges"],
            }
        )
    )


anyio.run(main, sys.argv[1])
