"""fastmcp's Client with the integration: one charge whose answer is lost, then the ledger (a JSON line on stdout).

python fastmcp_driver.py URL      (in .venv-agents; the server's charge outlasts one attempt)
"""

import json
import sys

import anyio
import fastmcp

from mcp_idempotency.integrations.fastmcp import call_tool
from mcp_idempotency.resend import Policy, Refused

ATTEMPT = Policy(timeout=1.0, attempts=12)  # shorter than the server's charge, so the first answer is lost


async def main(url: str) -> None:
    """Charge 7 once through the integration; print what came back, the tool list, and the ledger."""
    async with fastmcp.Client(url) as client:
        try:
            answer = (await call_tool(client, "charge_guarded", {"amount": 7}, policy=ATTEMPT)).content[0].text
        except Refused as refused:  # no model here: the caller gets the refusal
            answer = f"refused: {refused}"
        shown = [tool.model_dump(mode="json") for tool in await client.list_tools()]
        ledger = await client.call_tool("get_balance", {})
    print(json.dumps({"shown": shown, "result": answer, "charges": ledger.data["charges"]}))


anyio.run(main, sys.argv[1])
