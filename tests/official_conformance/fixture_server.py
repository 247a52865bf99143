"""The official conformance suite's task fixtures, served through our Tasks extension (mcp_idempotency_demo/tasks.py),
and the fixtures of the idempotency scenario drafted for it (upstream/conformance/).

The suite's task scenarios call tools by name (`greet`, `slow_compute`, `failing_job`,
`protocol_error_job`) that the ledger server does not have, so against it most checks
stop at "did not create a task". This server has those tools, behind the same
idempotency layer and the same Tasks extension, in the same order, as
`sep3182-ledger-server --tasks` (ledger_server.with_tasks): a check that fails here
fails on what tasks.py does, not on a missing tool. It leaves out the fixtures whose
behaviour tasks.py does not offer (a task that asks for input, `confirm_delete`,
`multi_input`, `test_tool_with_task`; a tool that requires a task), and
docs/official-conformance.md says why their checks fail.

The idempotency scenario counts a side effect: `test_idempotent_charge` counts each run,
`test_idempotent_charge_count` reads the count. The key is read where the extension puts
it (P26's `_meta` placement, the decided one), so the scenario is run with
MCP_CONFORMANCE_IDEMPOTENCY_PREFIX=com.example.sep3182 (docs/official-conformance-idempotency.md).

    python tests/official_conformance/fixture_server.py --transport http --port 8000 --store sqlite:PATH
"""

import argparse
import logging
import sys

import anyio
import mcp_types
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import Placement
from mcp_idempotency_demo import tasks
from mcp_idempotency_demo.ledger_server import SERVER_INFO, with_tasks

# SEP-2663: the server decides which calls run as tasks; these do, for a request that declares it.
TASK_TOOLS = ("slow_compute", "failing_job", "protocol_error_job")


def fixture_server(keys: Idempotency) -> MCPServer:
    """The suite's fixtures, each as its scenarios describe it, with Tasks around and inside `keys`."""
    mcp = MCPServer(**SERVER_INFO, log_level="WARNING", **with_tasks(keys, TASK_TOOLS))

    @mcp.tool()
    def greet(name: str) -> str:
        """Sync only: never a task."""
        return f"Hello, {name}!"

    @mcp.tool()
    async def slow_compute(seconds: float, label: str = "") -> str:
        """A task that takes `seconds` (0 for the immediate path)."""
        await anyio.sleep(seconds)
        return f"computed {label!r} in {seconds} s"

    @mcp.tool()
    def failing_job() -> str:
        """A task whose tool fails: a tool error (isError), so SEP-2663's `completed`."""
        raise ValueError("the job failed")

    @mcp.tool()
    def protocol_error_job() -> str:
        """A task that ends in a JSON-RPC error: SEP-2663's `failed`."""
        raise MCPError(code=mcp_types.INTERNAL_ERROR, message="the job broke")

    charges = {"charges": 0}  # one process: the count the idempotency scenario reads back

    @mcp.tool()
    async def test_idempotent_charge(amount: int, seconds: float = 0) -> str:
        """The idempotency scenario's side effect: waits `seconds`, then counts one charge."""
        await anyio.sleep(seconds)
        charges["charges"] += 1
        return f"charged {amount} (charge #{charges['charges']})"

    @mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def test_idempotent_charge_count() -> dict[str, int]:
        """How many charges have run, as structuredContent.charges."""
        return dict(charges)

    return mcp


def main() -> None:
    """Serve the fixtures over stateless Streamable HTTP on loopback, as the ledger server does; logs on stderr."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transport", choices=["http"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True, metavar="sqlite:PATH")
    settings = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    keys = Idempotency(settings.store, placement=Placement.META, tables=tasks.TABLES)
    app = fixture_server(keys).streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
