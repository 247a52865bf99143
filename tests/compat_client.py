"""The mcp 2.x clients of this project against one server, keyed calls only: what each does, as one JSON line.

    .venv-2x/bin/python tests/compat_client.py -- SERVER COMMAND...

Two clients: the SDK's own Client sending KeyedCall (mcp_idempotency.keyed_call), and the package's client
(mcp_idempotency.client),
which checks the capability first (C3, discover_settings). Each sends one charge twice under one key;
the count read after says whether the second ran. tests/test_backward_compatibility.py judges it.
"""

import json
import os
import sys

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_idempotency.client import GaveUp, KeyRefused, Policy, Settings, call_tool, discover_settings, new_key
from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams
from mcp_idempotency.rules import Placement


async def charges(session) -> int:
    return json.loads((await session.call_tool("get_balance", {})).content[0].text)["charges"]


def outcome(answer) -> dict:
    if isinstance(answer, BaseException):
        error = getattr(answer, "error", None)
        return {"raised": type(answer).__name__, "code": getattr(error, "code", None), "message": str(answer)[:160]}
    return {"result": answer.content[0].text}


async def twice(session, send) -> dict:
    """`send(key)` twice under one key: each answer, and how many charges the two made."""
    key, before, answers = new_key(), await charges(session), []
    for _ in range(2):
        try:
            answers.append(outcome(await send(key)))
        except (MCPError, KeyRefused, GaveUp) as error:
            answers.append(outcome(error))
    return {"answers": answers, "charges": await charges(session) - before}


async def main(command: list[str]) -> None:
    async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="auto") as client:
        session = client.session

        async def keyed_call(key: str):
            request = KeyedCall(
                params=KeyedCallParams(name="charge_guarded", arguments={"amount": 100}, idempotency_key=key)
            )
            return await session.send_request(request, mcp_types.CallToolResult)

        async def policy(key: str):
            return await call_tool(
                session,
                "charge_guarded",
                {"amount": 100},
                key=key,
                policy=Policy(timeout=5, attempts=2, first_back_off=0.1),
                settings=Settings(Placement.PARAMS),  # the SEP's field, which every server here reads
            )

        report = {
            "protocol": client.protocol_version,
            "capability": None if (settings := await discover_settings(session)) is None else settings.placement.value,
            "KeyedCall": await twice(session, keyed_call),
            "policy": await twice(session, policy),
        }
        print(json.dumps(report), flush=True)
        os._exit(0)  # the report is out; the SDK's orderly stdio shutdown would take seconds more


if __name__ == "__main__":
    anyio.run(main, sys.argv[sys.argv.index("--") + 1 :])
