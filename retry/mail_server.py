"""An outbox on the current SDK (mcp 2.x): tools that know nothing of the ledger, nor of idempotency.

retry/scenarios.py runs the same retry policy against this server and against
the package's ledger server, and tries here each other place a key could go. The tools:

    send_email   its input schema forbids extra properties (additionalProperties: false)
    send_sms     deduplicates on an argument of its own, `idempotency_key`
    notify       annotated idempotentHint: true, yet every call notifies again
    outbox       the ground truth: how many e-mails, texts and notifications went out

In front of them sits the package's dispatch layer, added in one line as any server
would add it (mcp_idempotency.layer): it reads params.idempotencyKey and nothing else
(P1), whatever the tool; with `--placement meta`, the extension's `_meta` key instead (P26).
Nothing here reaches into the layer.
Every log line goes to stderr: on stdio, stdout is the protocol.
"""

import argparse
import logging
import sys
from collections import Counter

import anyio
import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools.base import Tool

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.probe import sdk_hides_the_key
from mcp_idempotency_demo import options

STORE = "memory"  # one process serves one client here; the ledger server shows the shared stores
sent: Counter[str] = Counter()  # what went out, by kind: the ground truth the scenarios read
sms_by_key: dict[str, str] = {}  # send_sms's own deduplication: its key argument to its answer


def parse_args() -> argparse.Namespace:
    """The command line: the store and the windows of the layer, and the relay's delay."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", default=STORE, metavar="URL", help=f"memory or sqlite:PATH (default: {STORE})")
    options.add_common_options(parser)
    return parser.parse_args()


def strict(tool: Tool) -> Tool:
    """The tool, refusing any argument its schema does not name: additionalProperties is false."""
    loose = tool.fn_metadata.arg_model
    tool.fn_metadata.arg_model = type(
        loose.__name__, (loose,), {"model_config": {**loose.model_config, "extra": "forbid"}}
    )
    tool.parameters = tool.fn_metadata.arg_model.model_json_schema(by_alias=True)
    return tool


def outbox_server(keys: Idempotency, relay_delay: float) -> MCPServer:
    """The outbox's tools on an MCPServer, with `keys` as its idempotency layer."""

    async def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail."""
        await anyio.sleep(relay_delay)  # a slow mail relay, to catch a call in flight
        sent["email"] += 1
        return f"E-mail {sent['email']} sent to {to}: {subject}"

    mcp = MCPServer(
        "outbox",
        version="1.0",
        log_level="WARNING",
        extensions=[keys],
        middleware=[keys.advertise],
        lifespan=keys.lifespan,
        tools=[strict(Tool.from_function(send_email))],
    )

    @mcp.tool()
    def send_sms(to: str, text: str, idempotency_key: str | None = None) -> str:
        """Send a text message. A repeat of `idempotency_key` is not sent again (the tool's own deduplication)."""
        if idempotency_key is not None and idempotency_key in sms_by_key:
            return sms_by_key[idempotency_key]
        sent["sms"] += 1
        answer = f"Text {sent['sms']} sent to {to}"
        if idempotency_key is not None:
            sms_by_key[idempotency_key] = answer
        return answer

    @mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    def notify(to: str, text: str) -> str:
        """Notify someone. Annotated idempotent; a hint is all it is, and every call notifies again."""
        sent["notification"] += 1
        return f"Notification {sent['notification']} sent to {to}"

    @mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def outbox() -> dict[str, int]:
        """Test helper: how many e-mails, texts and notifications went out."""
        return {"email": sent["email"], "sms": sent["sms"], "notification": sent["notification"]}

    return mcp


def main() -> None:
    """Check the SDK as the ledger server does, then serve over stdio: one tenant, this process's client (P10'')."""
    settings = parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s", force=True)
    logging.getLogger("idempotency").setLevel(logging.DEBUG if settings.verbose else logging.INFO)
    refusal = sdk_hides_the_key()  # P12': never look idempotent while deduplicating nothing
    if refusal is not None:
        sys.exit(refusal)
    keys = Idempotency(settings.store, limits=options.limits_of(settings), placement=settings.placement)
    outbox_server(keys, settings.charge_delay).run()


if __name__ == "__main__":
    main()
