"""fastmcp's Client with the integration: one charge whose answer is lost, then the ledger (a JSON line on stdout).

python fastmcp_driver.py URL ATTEMPTS      (in .venv-agents; the server's charge outlasts one attempt)
"""

import json
import sys

import anyio
import fastmcp

from mcp_idempotency.integrations.fastmcp import call_tool
from mcp_idempotency.resend import GaveUp, KeyRefused, Policy

# An attempt shorter than the server's charge, so the first answer is lost; as many attempts as the test says.
ATTEMPT = Policy(timeout=1.0, attempts=int(sys.argv[2]))


async def main(url: str) -> None:
    """Charge 7 once through the integration; print what came back, the tool list, and the ledger."""
    async with fastmcp.Client(url) as client:
        try:
            answer = (await call_tool(client, "charge_guarded", {"amount": 7}, policy=ATTEMPT)).content[0].text
        except (KeyRefused, GaveUp) as failed:  # no model here: the caller gets the exception
            answer = f"{type(failed).__name__}: {failed}"
        shown = [tool.model_dump(mode="json") for tool in await client.list_tools()]
        ledger = await client.call_tool("get_balance", {})
    print(json.dumps({"shown": shown, "result": answer, "charges": ledger.data["charges"]}))


anyio.run(main, sys.argv[1])
