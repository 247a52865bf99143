"""An OpenAI Agents SDK agent with the integration's server, run by the SDK's Runner on a scripted model: the
model calls charge_guarded once, its answer is lost, and the model is shown only the tools and the tool's output
(a JSON line on stdout).

    python openai_agents_driver.py URL ATTEMPTS      (in .venv-agents; the server's charge outlasts one attempt)
"""

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from mcp_idempotency.integrations.openai_agents import KeyedMCPServerStreamableHttp
from mcp_idempotency.resend import Policy

# An attempt shorter than the server's charge, so the first answer is lost; as many attempts as the test says.
ATTEMPT = Policy(timeout=1.0, attempts=int(sys.argv[2]))


class ScriptedModel(Model):
    """A model that charges 7 once, then repeats the tool's output; it keeps everything it was handed."""

    def __init__(self) -> None:
        self.shown: list[Any] = []

    async def get_response(self, system_instructions, input, model_settings, tools, *rest, **options) -> ModelResponse:
        """The next turn: the tool call, or, once the tool's output is in, that output as the final answer."""
        self.shown.extend(
            {"name": tool.name, "description": tool.description, **tool.params_json_schema} for tool in tools
        )
        outputs = [item["output"] for item in input if isinstance(item, dict) and "output" in item]
        self.shown.extend(outputs)
        if not outputs:
            call = ResponseFunctionToolCall(
                type="function_call", call_id="call-1", name="charge_guarded", arguments=json.dumps({"amount": 7})
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=json.dumps(outputs[-1]), annotations=[])
        message = ResponseOutputMessage(type="message", id="m-1", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *arguments: Any, **options: Any) -> AsyncIterator[Any]:
        """Not used: the Runner is run without streaming."""
        raise NotImplementedError


async def main(url: str) -> None:
    """Run the agent once against the server at `url`; print what its model saw and the ledger."""
    set_tracing_disabled(True)  # no trace leaves the machine
    model = ScriptedModel()
    async with KeyedMCPServerStreamableHttp({"url": url}, policy=ATTEMPT) as server:
        run = await Runner.run(Agent(name="clerk", model=model, mcp_servers=[server]), "Charge 7.")
        ledger = json.loads((await server.call_tool("get_balance", {})).content[0].text)
    print(json.dumps({"shown": model.shown, "result": run.final_output, "charges": ledger["charges"]}))


anyio.run(main, sys.argv[1])
