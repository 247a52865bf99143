"""A client of shop.py that retries safely: one key per logical call, the same request sent again until answered.

    python shop_client.py ACCOUNT AMOUNT [--timeout SECONDS] -- SERVER COMMAND...
                                                e.g. -- python shop.py --store sqlite:shop.db

It pays, then e-mails the receipt, each as one logical call however many attempts it takes.
"""

import argparse
import logging
import sys

import anyio
import mcp_types
from mcp import Client, StdioServerParameters

from mcp_idempotency.client import Policy, call_tool, discover_settings


def text_of(result: mcp_types.CallToolResult) -> str:
    """The text a tool answered."""
    return " ".join(part.text for part in result.content if isinstance(part, mcp_types.TextContent))


async def main(account: str, amount: int, timeout: float, server: list[str]) -> None:
    """Pay and send the receipt, each retried under one key, on a server that promises to deduplicate."""
    async with Client(StdioServerParameters(command=server[0], args=server[1:])) as client:
        settings = await discover_settings(client)
        if settings is None:
            sys.exit("this server does not deduplicate keyed calls: a retried payment could run twice")
        policy = Policy(timeout=timeout, attempts=5)
        for tool in ("pay", "send_receipt"):
            result = await call_tool(
                client, tool, {"account": account, "amount": amount}, settings=settings, policy=policy
            )
            print(text_of(result), flush=True)


if __name__ == "__main__":
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("account")
    parser.add_argument("amount", type=int)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds each attempt waits (default: 10)")
    options = parser.parse_args(sys.argv[1:split])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")  # each retry, said
    anyio.run(main, options.account, options.amount, options.timeout, sys.argv[split + 1 :])
