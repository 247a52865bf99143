"""What the mcp 2.x demos share: the link that can lose a response, the server processes, the calls
and the one retry loop, and how a walkthrough prints.

ledger_demo, cluster_demo, auth_demo and retry/scenarios.py use it. client_demo.py (mcp 1.x) does
not: it is the reference demo, which must read alone, so it keeps its own link and retry loop.

The retry loop here narrates each attempt for the walkthrough (call_until_answered); a client's
retry policy is the package's, mcp_idempotency.client, which retry/scenarios.py plays, since that
policy is what it shows.
"""

import argparse
import socket
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams

# The package's ledger server, as this interpreter runs it; --server replaces it with a script.
LEDGER_SERVER = ["-m", "mcp_idempotency_demo.ledger_server"]
# The demos narrate the SEP's field on the wire, so every server they start, a stand-in's too, reads it there.
FIELD = ["--placement", "params"]
LOG_POLL = 0.01  # seconds between looks at the server's log, so its lines show as they happen
HELPERS = {"get_balance", "reset_ledger"}  # the demo's own calls: narrated in a line of their own
RESPONSE_TIMEOUT = 0.5  # seconds; the server answers in milliseconds, so only a lost or slow response times out
# Seconds the client waits for an answer the link is to lose. A client that gave up before the
# server answered would cancel a call still running, and the scenario would show no lost answer
# at all: CI once saw a first call take over RESPONSE_TIMEOUT. So this is long enough for a busy
# machine to answer first; the answer never comes, so every lost one costs this much.
LOST_RESPONSE_TIMEOUT = 2
HELPER_TIMEOUT = 10  # seconds for the demo's own calls: no part of a scenario, so a busy machine must not fail one
TIMED_OUT = types.REQUEST_TIMEOUT  # how the 2.x client reports that it stopped waiting (it also cancels, on stdio)
HTTP_START_TIMEOUT = 20  # seconds a server may take to listen
FIRST_BACK_OFF = 0.2  # seconds before retrying an in-progress key; doubled each time
ATTEMPTS = 6  # a retry loop is bounded: after this many tries the client reports failure


# ----------------------------------------------------------------------------
# How a walkthrough prints
# ----------------------------------------------------------------------------


def say(who: str, text: str) -> None:
    """One line of the walkthrough, attributed to client, server, link, ledger or an instance."""
    print(f"  {who:<7}{text}", flush=True)


def short(key: str) -> str:
    """A key as the narration shows it: its first 8 characters. The frames show it whole."""
    return key[:8] + "…"


def verdict(ok: bool, claim: str) -> bool:
    """Print PASS or FAIL for one scenario's claim, and return whether it held."""
    print(f"  {'PASS' if ok else 'FAIL'}   {claim}\n", flush=True)
    return ok


def server_option(parser) -> None:
    """--server, for a demo's argument parser: the command it starts its servers with."""
    parser.add_argument(
        "--server",
        metavar="SCRIPT",
        type=lambda script: [script],
        default=LEDGER_SERVER,
        help="play against this server script instead of the package's ledger server; "
        "the tests pass stand-ins that break one rule",
    )


def play_on_a_shared_store(play: Callable[[str | None, list[str]], Awaitable[bool]], description: str) -> None:
    """The command line of a demo of several instances on one store (--store, --server): play it, and
    exit 0 only if every scenario passed."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument(
        "--store",
        metavar="URL",
        help="the shared store: postgresql://... (an empty database of yours), or sqlite:PATH "
        "(default: a SQLite file in a temporary folder)",
    )
    server_option(parser)
    args = parser.parse_args()
    sys.exit(0 if anyio.run(play, args.store, args.server) else 1)


class ServerLog:
    """The server's stderr, in a file: its decision lines, printed in the order it writes them."""

    def __init__(self, path: Path, who: str = "server"):
        self.path, self.who = path, who
        self.seen = 0  # how much of the file has been printed
        self.keys: set[str] = set()  # keys the client sent, to shorten in the server's lines

    def show(self) -> None:
        """Print the decision lines written since the last look, keys shortened."""
        with self.path.open() as log:
            log.seek(self.seen)
            text = log.read()
            self.seen = log.tell()
        for line in text.splitlines():
            # The server's own decisions, not SDK chatter, and not about the demo's helper calls.
            if line.startswith("idempotency: ") and not line.endswith(tuple(f"tool={name}" for name in HELPERS)):
                line = line.removeprefix("idempotency: ")
                for key in self.keys:
                    line = line.replace(repr(key), short(key))
                say(self.who, line)

    async def follow(self) -> None:
        """Show the server's lines as it writes them, not only when a frame comes back."""
        while True:
            self.show()
            await anyio.sleep(LOG_POLL)


def frame(message) -> str:
    """A JSON-RPC message as the transport writes it on the wire."""
    return message.model_dump_json(by_alias=True, exclude_none=True)


# ----------------------------------------------------------------------------
# The link: the SDK's client session on one side, its transport on the other
# ----------------------------------------------------------------------------


@dataclass
class Link:
    """Carries frames between session and transport; can lose a response after the server sent it;
    shows what it carries, the server's lines first; notices when the server's side ends."""

    server_log: ServerLog
    show_calls: bool = False  # print the frame of each tools/call the demo makes, but its helpers'
    show_every_frame: bool = False  # print every frame, both ways
    lose_next: bool = False  # lose the response to the next tools/call
    losing: set = field(default_factory=set)  # ids of requests whose response is to be lost
    lost_result: dict | None = None  # the result of the last response lost, as the server sent it
    delivered_result: dict | None = None  # the result of the last response delivered
    discovered: dict | None = None  # the server/discover result as it came off the wire
    last_request: int | str | None = None  # the id of the last request sent, for the narration to name
    discover_id: int | str | None = None
    closed: bool = False  # the server's side of the transport has ended

    def lose_next_response(self) -> None:
        """Lose the response to the next tools/call, after the server has sent it."""
        self.lose_next = True

    async def outbound(self, from_session, to_server) -> None:
        """Session to server: mark the request whose response is to be lost; show the frames asked for."""
        async with from_session, to_server:
            async for message in from_session:
                self.sent(message.message)
                await to_server.send(message)

    def sent(self, request) -> None:
        """Note a frame on its way to the server, and print it if asked to."""
        shown = self.show_every_frame
        if isinstance(request, types.JSONRPCRequest):
            self.last_request = request.id
            if request.method == "server/discover":
                self.discover_id = request.id
            if request.method == "tools/call":
                if self.lose_next:
                    self.losing.add(request.id)
                    self.lose_next = False
                if "idempotencyKey" in request.params:
                    self.server_log.keys.add(request.params["idempotencyKey"])
                shown = shown or (self.show_calls and request.params["name"] not in HELPERS)
        if shown:
            say("wire →", frame(request))

    async def inbound(self, from_server, to_session) -> None:
        """Server to session: drop a response that is to be lost; deliver the rest."""
        async with from_server, to_session:
            async for message in from_server:
                # The server logs a decision before it answers, so its lines go first.
                self.server_log.show()
                if isinstance(message, SessionMessage) and not self.delivers(message.message):
                    continue
                await to_session.send(message)
        self.closed = True

    def delivers(self, reply) -> bool:
        """Note a frame from the server; False if it is the response to lose."""
        if self.show_every_frame:
            say("wire ←", frame(reply))
        if not isinstance(reply, types.JSONRPCResponse | types.JSONRPCError):
            return True
        if reply.id in self.losing:
            self.losing.discard(reply.id)
            self.lost_result = getattr(reply, "result", None)
            say("link", f"✂ the response to request {reply.id} is lost on its way back")
            return False
        if isinstance(reply, types.JSONRPCResponse):
            if reply.id == self.discover_id:
                self.discovered = reply.result
            self.delivered_result = reply.result
        return True


@asynccontextmanager
async def linked(transport, link: Link):
    """A transport for the SDK's Client: `transport`, with the link between it and the session."""
    async with transport as (from_server, to_server):
        to_link, from_session = anyio.create_memory_object_stream(0)
        to_session, from_link = anyio.create_memory_object_stream(0)
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(link.outbound, from_session, to_server)
            pumps.start_soon(link.inbound, from_server, to_session)
            pumps.start_soon(link.server_log.follow)
            yield from_link, to_link
            pumps.cancel_scope.cancel()


# ----------------------------------------------------------------------------
# Servers over HTTP, on loopback ports
# ----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_http_server(server: list[str], server_args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """Start `server` (what follows the interpreter) over Streamable HTTP on a free loopback port,
    its output in `log`; its process and URL."""
    port = free_port()
    with log.open("a") as errlog:
        process = subprocess.Popen(
            [sys.executable, *server, *FIELD, *server_args, "--transport", "http", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=errlog,
            stderr=errlog,
        )
    return process, f"http://127.0.0.1:{port}/mcp"


async def listening(process: subprocess.Popen, url: str, log: Path) -> None:
    """Wait until the server accepts connections; stop the demo with its own words if it exits instead."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with anyio.fail_after(HTTP_START_TIMEOUT):
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the server did not start: {log.read_text().strip()}")
            try:
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                return
            except OSError:
                await anyio.sleep(0.05)


# ----------------------------------------------------------------------------
# Calls, as any SEP-3182 client makes them, and the demos' retry loop
# ----------------------------------------------------------------------------


def new_key() -> str:
    """A fresh idempotencyKey: a random UUID, as rule W5 advises, so keys never collide by chance."""
    return str(uuid.uuid4())


async def call_tool(
    client: Client, name: str, arguments: dict, key: str | None = None, timeout: float | None = None
) -> types.CallToolResult:
    """A tools/call with the key, if any, beside `arguments` (W1); at most `timeout` seconds' wait,
    by default RESPONSE_TIMEOUT, or HELPER_TIMEOUT for the demo's own calls."""
    if timeout is None:
        timeout = HELPER_TIMEOUT if name in HELPERS else RESPONSE_TIMEOUT
    # Client.call_tool has no room for a key, and the 2.x params model would drop
    # it: KeyedCallParams declares it, so it goes on the wire as idempotencyKey.
    request = KeyedCall(params=KeyedCallParams(name=name, arguments=arguments, idempotency_key=key))
    return await client.session.send_request(request, types.CallToolResult, request_read_timeout_seconds=timeout)


def rejection_type(error: MCPError) -> str | None:
    """P5: why the server rejected the call, error.data.type; never the message, never the code alone."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def retryable(error: MCPError) -> bool:
    """P5': may the same request, sent later, succeed? The server's error.data.retryable says; nothing else."""
    return isinstance(error.data, dict) and error.data.get("retryable") is True


def text(result: types.CallToolResult) -> str:
    """The text a tool answered with."""
    return result.content[0].text


async def send_charge(
    client: Client,
    link: Link,
    amount: int,
    key: str,
    who: str,
    to: str,
    lose_response: bool = False,
    timeout: float | None = None,
):
    """charge_guarded(amount) with `key`, narrated as `who` sending it to `to`; the result, or the MCPError
    it was refused with. `lose_response`: the link loses the answer, after the server sent it."""
    say(who, f"sends charge_guarded(amount={amount}), key {short(key)}, to {to}")
    if lose_response:
        link.lose_next_response()
    if timeout is None:
        timeout = LOST_RESPONSE_TIMEOUT if lose_response else RESPONSE_TIMEOUT
    try:
        result = await call_tool(client, "charge_guarded", {"amount": amount}, key, timeout)
    except MCPError as error:
        if error.code == TIMED_OUT:
            say(who, f"no answer from {to} within {timeout}s")
        else:
            say(who, f"← {to}: error {error.code}: {error.message} (data.type {rejection_type(error)})")
        return error
    say(who, f"← {to}: {text(result)}")
    return result


class GaveUp(Exception):
    """A bounded retry loop ran out of attempts."""


@dataclass
class Answered:
    """What a retry loop got in the end, and why it retried each attempt before."""

    result: types.CallToolResult
    retried: list[str]  # "timed out", or the error.data.type of a rejection the server marked retryable


async def call_until_answered(
    client: Client, name: str, arguments: dict, key: str, who: str = "client", first_back_off: float = FIRST_BACK_OFF
) -> Answered:
    """Retry a keyed call as a client should: on a timeout at once; on a rejection the server marks retryable
    (in progress, store full or unavailable), backing off; any other rejection (a conflict, an invalid key, one
    that does not say) is final (P5')."""
    back_off, retried = first_back_off, []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return Answered(await call_tool(client, name, arguments, key), retried)
        except MCPError as error:
            if error.code == TIMED_OUT:
                say(who, f"attempt {attempt}: no response within {RESPONSE_TIMEOUT}s; retrying with the same key")
                retried.append("timed out")
                continue
            if not retryable(error):
                say(who, f"attempt {attempt}: ← {rejection_type(error)}, not retryable: final")
                raise
            say(who, f"attempt {attempt}: ← {rejection_type(error)}, retryable; backing off {back_off:.1f}s")
            retried.append(rejection_type(error))
            await anyio.sleep(back_off)
            back_off *= 2
    raise GaveUp(f"no answer after {ATTEMPTS} attempts")
