"""An outbox on the current SDK (mcp 2.x): tools that know nothing of the ledger, nor of idempotency.

retry/scenarios.py runs the same retry policy against this server and against
sdk2/server.py's ledger, and tries here each other place a key could go. The tools:

    send_email   its input schema forbids extra properties (additionalProperties: false)
    send_sms     deduplicates on an argument of its own, `idempotency_key`
    notify       annotated idempotentHint: true, yet every call notifies again
    seen_meta    answers with the `_meta` its handler received, as the SDK hands it over
    outbox       the ground truth: how many e-mails, texts and notifications went out

In front of them sits sdk2/server.py's dispatch layer, unchanged (its middleware and
its store): it reads params.idempotencyKey and nothing else (P1), whatever the tool.
Every log line goes to stderr: on stdio, stdout is the protocol.
"""

import argparse
import logging
import sys
from collections import Counter
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk2"))

# sdk2/server.py checks the SDK as it is imported: one line and exit 1 without mcp 2.x.
import server as sep_layer  # noqa: E402  isort: skip
import anyio  # noqa: E402
import mcp_types  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.tools.base import Tool  # noqa: E402

import sep3182  # noqa: E402
from store import Limits, open_store  # noqa: E402

STORE = "memory"  # one process serves one client here; sdk2/server.py shows the shared stores
sent = Counter()  # what went out, by kind: the ground truth the scenarios read
sms_by_key: dict[str, str] = {}  # send_sms's own deduplication: its key argument to its answer


settings: argparse.Namespace | None = None  # the command line: main() reads it before serving


def parse_args() -> argparse.Namespace:
    """The command line: the store and the windows of sdk2/server.py's layer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=STORE, metavar="URL", help=f"memory or sqlite:PATH (default: {STORE})")
    parser.add_argument("--lease", type=sep3182.seconds, default=sep_layer.LEASE_SECONDS, metavar="SECONDS",
                        help="how long a claim is held (P18; default: 30)")
    sep3182.add_common_options(parser)
    # What the layer of sdk2/server.py reads of its own command line: stdio, so one tenant (P10'').
    parser.set_defaults(transport="stdio", issuer=None)
    return parser.parse_args()


@asynccontextmanager
async def idempotency_store(_server):
    """The store sdk2/server.py's layer keeps its records in, open while the server runs."""
    async with open_store(settings.store, Limits(settings.retention, settings.lease, settings.max_records)) as store:
        yield store


def strict(tool: Tool) -> Tool:
    """The tool, refusing any argument its schema does not name: additionalProperties is false."""
    loose = tool.fn_metadata.arg_model
    tool.fn_metadata.arg_model = type(loose.__name__, (loose,), {"model_config": {**loose.model_config,
                                                                                  "extra": "forbid"}})
    tool.parameters = tool.fn_metadata.arg_model.model_json_schema(by_alias=True)
    return tool


async def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail."""
    await anyio.sleep(settings.charge_delay)  # a slow mail relay, to catch a call in flight
    sent["email"] += 1
    return f"E-mail {sent['email']} sent to {to}: {subject}"


# The layer is sdk2/server.py's middleware, unchanged: it sees raw params before any tool runs.
mcp = MCPServer("outbox", version="1.0", log_level="WARNING", lifespan=idempotency_store,
                middleware=[sep_layer.idempotency], tools=[strict(Tool.from_function(send_email))])


@mcp.tool()
def send_sms(to: str, text: str, idempotency_key: str | None = None) -> str:
    """Send a text message. A repeat of `idempotency_key` is not sent again (the tool's own deduplication)."""
    if idempotency_key in sms_by_key:
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
def seen_meta(ctx: Context) -> dict:
    """Test helper: the request's `_meta`, as this SDK hands it to a tool handler."""
    return dict(ctx.request_context.meta or {})


@mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
def outbox() -> dict[str, int]:
    """Test helper: how many e-mails, texts and notifications went out."""
    return {"email": sent["email"], "sms": sent["sms"], "notification": sent["notification"]}


def main() -> None:
    """Check the SDK as sdk2/server.py does, then serve over stdio."""
    global settings
    settings = sep_layer.settings = parse_args()  # the layer reads its settings where sdk2/server.py keeps them
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s", force=True)
    sep_layer.log.setLevel(logging.DEBUG if settings.verbose else logging.INFO)
    why = sep_layer.sdk_hides_the_key()  # P12': never look idempotent while deduplicating nothing
    if why is not None:
        sys.exit(sep_layer.SDK_HIDES_KEY.format(version=version("mcp"), why=why))
    mcp.run()


if __name__ == "__main__":
    main()
