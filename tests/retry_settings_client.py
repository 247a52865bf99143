"""The package's client (mcp_idempotency.client) against a real 2.x server over stdio: one scenario, its outcome
printed as one JSON line.

    .venv-2x/bin/python tests/retry_settings_client.py SCENARIO -- SERVER COMMAND...

tests/test_retry_settings.py runs each scenario and reads the line; nothing here judges it.
"""

import json
import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters

from mcp_idempotency.client import GaveUp, KeyRefused, KeyTooLong, Policy, WindowPassed, call_tool, discover_settings

QUICK = Policy(timeout=0.5, attempts=6, first_back_off=0.1, max_back_off=0.4)


async def balance(session) -> int:
    result = await session.call_tool("get_balance", {})
    return json.loads(result.content[0].text)["charges"]


def outcome_of(error: BaseException) -> dict:
    return {"raised": type(error).__name__, "message": str(error)}


async def scenario(name: str, session) -> dict:
    settings = await discover_settings(session)
    seen = {"settings": None if settings is None else [settings.max_key_length, settings.retention_seconds]}
    before = await balance(session)
    started = time.monotonic()
    try:
        if name == "settings":
            pass
        elif name == "caller-key-too-long":  # a caller's key one past maxKeyLength
            await call_tool(
                session,
                "charge_guarded",
                {"amount": 1},
                key="k" * (settings.max_key_length + 1),
                settings=settings,
                policy=QUICK,
            )
        elif name in ("minted-key-fits", "minted-key-ignoring-settings"):
            await call_tool(
                session,
                "charge_guarded",
                {"amount": 1},
                policy=QUICK,
                settings=settings if name == "minted-key-fits" else None,
            )
        elif name in ("window-passed", "window-ignored"):  # a charge slower than every attempt's timeout
            await call_tool(
                session,
                "charge_guarded",
                {"amount": 1},
                policy=Policy(timeout=0.3, attempts=40, first_back_off=0.1, max_back_off=0.2),
                settings=settings if name == "window-passed" else None,
            )
        else:  # "reject:<JSON error.data>": refused twice with that data, then run
            data = json.loads(name.removeprefix("reject:"))
            await call_tool(
                session,
                "charge_guarded",
                {"amount": 1, "note": {"reject": data, "times": 2}},
                settings=settings,
                policy=QUICK,
            )
        seen["outcome"] = {"result": True}
    except (GaveUp, KeyRefused, KeyTooLong, WindowPassed) as error:
        seen["outcome"] = outcome_of(error)
    seen["seconds"] = round(time.monotonic() - started, 2)
    await anyio.sleep(0)
    seen["charges"] = await balance(session) - before
    return seen


async def main(name: str, command: list[str]) -> None:
    async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="auto") as client:
        print(json.dumps(await scenario(name, client.session)), flush=True)
        # The verdict is out; the SDK's orderly stdio shutdown takes seconds more. Exiting closes the server's
        # stdin, and it ends on that EOF as it does when any client goes away.
        os._exit(0)


if __name__ == "__main__":
    split = sys.argv.index("--")
    anyio.run(main, sys.argv[1], sys.argv[split + 1 :])
