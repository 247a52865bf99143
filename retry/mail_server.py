"""An outbox on the current SDK (mcp 2.x): tools that know nothing of the ledger, nor of idempotency.

retry/scenarios.py runs the same retry policy against this server and against
the package's ledger server, and tries here each other place a key could go. The tools:

    send_email   its input schema forbids extra properties (additionalProperties: false); with
                 --provider, it sends through that mail API (mail_provider.py), forwarding
                 the layer's downstream key as the Idempotency-Key header (P27), unless
                 --no-forwarding, to show what the key saves
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
import json
import logging
import sys
import urllib.request
from collections import Counter

import anyio
import anyio.to_thread
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
    parser.add_argument(
        "--store", default=STORE, metavar="URL", help=f"memory, sqlite:PATH or postgresql://... (default: {STORE})"
    )
    parser.add_argument("--provider", metavar="URL", help="send e-mails through this mail API (default: count here)")
    parser.add_argument("--no-forwarding", action="store_true", help="send no Idempotency-Key to the provider")
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


def through_provider(provider: str, message: dict[str, str], key: str | None) -> int:
    """POST one e-mail to the mail API, under `key` if there is one; the number it gave the e-mail."""
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    request = urllib.request.Request(provider, json.dumps(message).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:  # a 409 or a 422 raises: the tool's error
        number: int = json.load(answer)["id"]
    return number


def outbox_server(keys: Idempotency, relay_delay: float, provider: str | None, forward: bool) -> MCPServer:
    """The outbox's tools on an MCPServer, with `keys` as its idempotency layer."""

    async def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail."""
        await anyio.sleep(relay_delay)  # a slow mail relay, to catch a call in flight
        if provider is None:
            sent["email"] += 1
            return f"E-mail {sent['email']} sent to {to}: {subject}"
        # P27: the same key on every retry of this call, on every instance: a send repeated
        # by a takeover (its first holder died or froze after sending) is the API's to drop.
        key = keys.downstream_key() if forward else None
        message = {"to": to, "subject": subject, "body": body}
        number = await anyio.to_thread.run_sync(through_provider, provider, message, key)
        return f"E-mail {number} sent to {to}: {subject}"

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
    outbox_server(keys, settings.charge_delay, settings.provider, not settings.no_forwarding).run()


if __name__ == "__main__":
    main()
