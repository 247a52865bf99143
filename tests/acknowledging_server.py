"""A tiny 2.x server over stdio whose tools give the answers no honest server gives, for
tests/test_gateway_answers.py, which reads them through the package's client half (the real acknowledgement it reads
from the 2.x ledger server).

    .venv-2x/bin/python tests/acknowledging_server.py

It advertises the extension with a 1 s deadline and a 1 s lease, so a client's default policy stops sending a
key that is still in progress 2 s after its first attempt.

Each tool takes the key as its argument `key` and counts its runs (`runs` reads the count):
- `plain`: a result to a keyed call without the acknowledgement, as a server that ignored the key answers;
- `own_error`: an isError result, acknowledged, whose text quotes the in-progress rejection's message: a tool's
  own error that the server recorded, which a client must return as it came;
- `unacknowledged_error`: the same text, isError, no acknowledgement: what a gateway makes of a rejection.
"""

from collections import Counter
from typing import Any

import mcp_types
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer

from mcp_idempotency import rules
from mcp_idempotency.rules import ACKNOWLEDGEMENT, IN_PROGRESS, MESSAGES, acknowledgement


class Advertised(Extension):
    """The extension's capability, its settings short: a key is in progress 2 s at most."""

    identifier = rules.EXTENSION_ID

    def settings(self) -> dict[str, Any]:
        return rules.capability(rules.MAX_KEY_LENGTH, rules.RETENTION_SECONDS, deadline=1, lease=1)


server = MCPServer("acknowledging", log_level="WARNING", extensions=[Advertised()])
runs: Counter[str] = Counter()


def answer(tool: str, key: str, acknowledged: bool, is_error: bool = False) -> mcp_types.CallToolResult:
    """The tool's answer, counted: its text says which tool ran, or quotes the in-progress message."""
    runs[tool] += 1
    text = f"the tool says: {MESSAGES[IN_PROGRESS]}" if is_error else f"{tool} ran"
    meta = {ACKNOWLEDGEMENT: acknowledgement(key)} if acknowledged else None
    return mcp_types.CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": is_error, "_meta": meta}
    )


@server.tool()
async def plain(key: str) -> mcp_types.CallToolResult:
    """A result, not acknowledged."""
    return answer("plain", key, acknowledged=False)


@server.tool()
async def own_error(key: str) -> mcp_types.CallToolResult:
    """The tool's own error, acknowledged, quoting a rejection's message."""
    return answer("own_error", key, acknowledged=True, is_error=True)


@server.tool()
async def unacknowledged_error(key: str) -> mcp_types.CallToolResult:
    """A rejection's message as an isError result, not acknowledged: a flattened rejection."""
    return answer("unacknowledged_error", key, acknowledged=False, is_error=True)


@server.tool()
async def count() -> dict[str, int]:
    """How many times each tool ran."""
    return dict(runs)


if __name__ == "__main__":
    server.run()
