"""Play SEP-3182's scenarios on the current SDK: an mcp 2.x client, on the 2026-07-28 revision,
against the 2.x ledger server over stdio and over Streamable HTTP, each checked against the ledger.

    sep3182-demo                    over stdio, then over HTTP
    sep3182-demo --transport http   one transport only
    sep3182-demo --wire             also print every JSON-RPC frame, both ways

The client finds the capability through server/discover (the SDK's auto mode) and
relies on keys only if it is there. For HTTP the demo starts the server itself on
a free loopback port and stops it afterwards. A lost response is really lost: a
link between the SDK's client session and its transport drops it after the
server sent it, so the client's timeout and retry are the SDK's own.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path


import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from ..keyed_call import KeyedCall, KeyedCallParams
from ..rules import CONFLICT, IN_PROGRESS, STORE_FULL, STORE_UNAVAILABLE
from .harness import HELPERS, ServerLog, say, short, verdict

# The 2.x ledger server, as this interpreter runs it; the tests point it at a stand-in.
SERVER = ["-m", "mcp_idempotency.demo.ledger_server"]
RESPONSE_TIMEOUT = 0.5  # seconds; the server answers in milliseconds, so only a lost or slow response times out
SLOW_TOOL_DELAY = "1.2"  # seconds each charge takes in scenario 4: longer than the client's timeout
FIRST_BACK_OFF = 0.2  # seconds before retrying an in-progress key; doubled each time
ATTEMPTS = 6  # a retry loop is bounded: after this many tries the client reports failure
HTTP_START_TIMEOUT = 20  # seconds the HTTP server may take to listen
TIMED_OUT = -32001  # how the 2.x client reports that it stopped waiting (it also cancels, on stdio)


def frame(message) -> str:
    """A JSON-RPC message as the transport writes it on the wire."""
    return message.model_dump_json(by_alias=True, exclude_none=True)


# ----------------------------------------------------------------------------
# The link: the SDK's client session on one side, its transport on the other
# ----------------------------------------------------------------------------


@dataclass
class Link:
    """Carries frames between session and transport; can lose a response; shows what it carries."""

    show_every_frame: bool
    server_log: ServerLog
    show_calls: bool = True  # print the frame of each tools/call the demo makes
    lose_next: bool = False
    losing: set = field(default_factory=set)  # ids of requests whose response is to be lost
    lost_result: dict | None = None  # the result of the last response lost, as the server sent it
    delivered_result: dict | None = None  # the result of the last response delivered
    discovered: dict | None = None  # the server/discover result as it came off the wire
    last_request: int | str | None = None  # the id of the last request sent, for the narration to name
    discover_id: int | str | None = None

    def lose_next_response(self) -> None:
        """Lose the response to the next tools/call, after the server has sent it."""
        self.lose_next = True

    async def outbound(self, from_session, to_server) -> None:
        """Session to server: mark the request whose response is to be lost; show the tools/call frames."""
        async with from_session, to_server:
            async for message in from_session:
                request = message.message
                if isinstance(request, types.JSONRPCRequest):
                    self.last_request = request.id
                    if request.method == "server/discover":
                        self.discover_id = request.id
                if isinstance(request, types.JSONRPCRequest) and request.method == "tools/call":
                    if self.lose_next:
                        self.losing.add(request.id)
                        self.lose_next = False
                    if "idempotencyKey" in request.params:
                        self.server_log.keys.add(request.params["idempotencyKey"])
                    if (self.show_calls and request.params["name"] not in HELPERS) or self.show_every_frame:
                        say("wire →", frame(request))
                elif self.show_every_frame:
                    say("wire →", frame(request))
                await to_server.send(message)

    async def inbound(self, from_server, to_session) -> None:
        """Server to session: drop a response that is to be lost; deliver the rest."""
        async with from_server, to_session:
            async for message in from_server:
                if isinstance(message, SessionMessage):
                    # The server logs a decision before it answers, so its lines go first.
                    self.server_log.show()
                    reply = message.message
                    if self.show_every_frame:
                        say("wire ←", frame(reply))
                    if isinstance(reply, types.JSONRPCResponse):
                        if reply.id == self.discover_id:
                            self.discovered = reply.result
                        if reply.id in self.losing:
                            self.losing.discard(reply.id)
                            self.lost_result = reply.result
                            say("link", f"✂ the response to request {reply.id} is lost on its way back")
                            continue
                        self.delivered_result = reply.result
                await to_session.send(message)


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
# The server, over stdio or HTTP, with its decision log on
# ----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_http_server(server_args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """Start the 2.x ledger server over Streamable HTTP on a free loopback port; its process and URL."""
    port = free_port()
    with log.open("a") as errlog:
        process = subprocess.Popen([sys.executable, *SERVER, *server_args, "--transport", "http",
                                    "--port", str(port)], stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
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


@asynccontextmanager
async def http_server(server_args: list[str], log: Path):
    """the 2.x ledger server over Streamable HTTP on a free loopback port: its URL, until the block ends."""
    process, url = start_http_server(server_args, log)
    try:
        await listening(process, url, log)
        yield url
    finally:
        process.terminate()
        process.wait()


@dataclass
class Demo:
    """A running server and the SDK's client talking to it through a link."""

    client: Client
    link: Link
    transport: str


@asynccontextmanager
async def connect(transport: str, show_every_frame: bool, *server_args: str):
    """Start the 2.x ledger server on a fresh store, and connect the SDK's Client to it through a link."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        log.touch()
        arguments = ["--verbose", "--store", f"sqlite:{folder}/store.db", *server_args]
        link = Link(show_every_frame, ServerLog(log))
        if transport == "stdio":
            with log.open("w") as errlog:
                inner = stdio_client(StdioServerParameters(command=sys.executable, args=[*SERVER, *arguments]),
                                     errlog=errlog)
                async with Client(linked(inner, link), mode="auto") as client:  # auto: server/discover first
                    yield Demo(client, link, transport)
        else:
            async with http_server(arguments, log) as url:
                async with Client(linked(streamable_http_client(url), link), mode="auto") as client:
                    yield Demo(client, link, transport)


# ----------------------------------------------------------------------------
# Calls, as any SEP-3182 client makes them
# ----------------------------------------------------------------------------


def new_key() -> str:
    """A fresh idempotencyKey: a random UUID, as rule W5 advises, so keys never collide by chance."""
    return str(uuid.uuid4())


async def call_tool(demo: Demo, name: str, arguments: dict, key: str | None = None,
                    timeout: float = RESPONSE_TIMEOUT) -> types.CallToolResult:
    """A tools/call with the key, if any, beside `arguments` (W1); at most `timeout` seconds' wait."""
    # Client.call_tool has no room for a key, and the 2.x params model would drop
    # it: KeyedCallParams declares it, so it goes on the wire as idempotencyKey.
    request = KeyedCall(params=KeyedCallParams(name=name, arguments=arguments, idempotency_key=key))
    return await demo.client.session.send_request(request, types.CallToolResult, request_read_timeout_seconds=timeout)


def rejection_type(error: MCPError) -> str | None:
    """P5: what a client branches on, error.data.type; never the message, never the code alone."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def how_the_client_gave_up(demo: Demo) -> str:
    """What the 2.x client does when it stops waiting, on this transport."""
    if demo.transport == "stdio":
        return "the 2.x client stops waiting and sends notifications/cancelled"
    return "the 2.x client stops waiting and closes the HTTP request"


class GaveUp(Exception):
    """A bounded retry loop ran out of attempts."""


async def call_until_answered(demo: Demo, name: str, arguments: dict, key: str) -> types.CallToolResult:
    """Retry a keyed call as a client should: on a timeout, on in-progress and on store-full, backing off;
    on a conflict or an invalid key, never: those are final (P5)."""
    back_off = FIRST_BACK_OFF
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await call_tool(demo, name, arguments, key)
        except MCPError as error:
            if error.code == TIMED_OUT:
                say("client", f"attempt {attempt}: no response within {RESPONSE_TIMEOUT}s; "
                              f"{how_the_client_gave_up(demo)}; retrying with the same key")
                continue
            if rejection_type(error) not in (IN_PROGRESS, STORE_FULL, STORE_UNAVAILABLE):
                raise  # CONFLICT, INVALID_KEY: retrying the same request cannot succeed
            say("client", f"attempt {attempt}: ← {rejection_type(error)}; backing off {back_off:.1f}s")
            await anyio.sleep(back_off)
            back_off *= 2
    raise GaveUp(f"no answer after {ATTEMPTS} attempts")


def text(result: types.CallToolResult) -> str:
    """The text a tool answered with."""
    return result.content[0].text


async def ledger(demo: Demo) -> dict:
    """Ground truth from get_balance, printed: never trust a replayed text about the balance."""
    truth = json.loads(text(await call_tool(demo, "get_balance", {})))
    say("ledger", f"{truth['charges']} charge(s), balance {truth['balance']} "
                  f"(read with get_balance, request {demo.link.last_request})")
    return truth


async def reset(demo: Demo) -> None:
    """Start a scenario from an empty ledger; the server keeps the keys it has recorded."""
    await call_tool(demo, "reset_ledger", {})
    say("client", f"resets the ledger to 0 (reset_ledger, request {demo.link.last_request}); recorded keys are kept")


async def charge_with_lost_response(demo: Demo, tool: str, amount: int, key: str | None) -> types.CallToolResult:
    """Charge once, lose the response, time out, and retry the very same call."""
    demo.link.lose_next_response()
    say("client", f"calls {tool}(amount={amount})" + (f" with idempotencyKey {short(key)}" if key else ", no key"))
    try:
        await call_tool(demo, tool, {"amount": amount}, key)
    except MCPError as error:
        if error.code != TIMED_OUT:
            raise
        say("client", f"no response within {RESPONSE_TIMEOUT}s; {how_the_client_gave_up(demo)}, "
                      "then retries the same call")
    result = await call_tool(demo, tool, {"amount": amount}, key)
    say("client", f"← {text(result)}")
    return result


# ----------------------------------------------------------------------------
# The scenarios
# ----------------------------------------------------------------------------


async def no_key_double_charges(demo: Demo) -> bool:
    """Scenario 1: without a key, a retry after a lost response charges twice."""
    print("1. No key: the response is lost, the client retries, the customer pays twice")
    await reset(demo)
    await charge_with_lost_response(demo, "charge_unguarded", 100, None)
    truth = await ledger(demo)
    return verdict(truth == {"balance": 200, "charges": 2},
                   "the failure is real: one intended charge of 100 was applied twice")


async def key_deduplicates(demo: Demo, key: str) -> bool:
    """Scenario 2: with a key, the same retry gets the original result and charges once."""
    print("2. With an idempotencyKey: the same lost response and retry, deduplicated")
    await reset(demo)
    say("client", f"mints idempotencyKey {key} once, before the first attempt")
    await charge_with_lost_response(demo, "charge_guarded", 100, key)
    lost, delivered = demo.link.lost_result, demo.link.delivered_result  # both as they came off the wire
    say("client", f"lost response: {lost['content'][0]['text']!r}; the retry's: {delivered['content'][0]['text']!r}")
    say("client", "the two results compared whole: " + ("identical, the original outcome with no replay marker "
                                                        "(P6; the SEP defines none, row S2b)" if lost == delivered else "NOT identical"))
    truth = await ledger(demo)
    return verdict(truth == {"balance": 100, "charges": 1} and lost == delivered,
                   "one charge; the retry got the original outcome without running the tool again")


async def conflicting_arguments_rejected(demo: Demo, key: str) -> bool:
    """Scenario 3: the same key with different arguments is rejected and charges nothing."""
    print("3. The same idempotencyKey with different arguments: rejected")
    say("client", f"reuses idempotencyKey {short(key)} for charge_guarded(amount=250)")
    try:
        await call_tool(demo, "charge_guarded", {"amount": 250}, key)
        rejected_as = None
    except MCPError as error:
        rejected_as = rejection_type(error)
        say("client", f"← error {error.code}: {error.message} (data.type {rejected_as})")
    truth = await ledger(demo)
    say("client", "retries the original call, amount=100, with the same key")
    original = await call_tool(demo, "charge_guarded", {"amount": 100}, key)
    say("client", f"← {text(original)}")
    unchanged = await ledger(demo)
    return verdict(rejected_as == CONFLICT and truth == unchanged == {"balance": 100, "charges": 1},
                   "conflict rejected, nothing charged, and the original key still replays")


async def slow_tool_retried_until_replayed(transport: str, show_every_frame: bool) -> bool:
    """Scenario 4: the usual retry: a tool slower than the client's timeout, retried with back-off."""
    print(f"4. A tool slower than the client's timeout (each charge takes {SLOW_TOOL_DELAY}s, "
          f"the client waits {RESPONSE_TIMEOUT}s)")
    key = new_key()
    async with connect(transport, show_every_frame, "--charge-delay", SLOW_TOOL_DELAY) as demo:
        say("client", f"calls charge_guarded(amount=100) with idempotencyKey {short(key)}, retrying until answered")
        try:
            say("client", f"← {text(await call_until_answered(demo, 'charge_guarded', {'amount': 100}, key))}")
        except GaveUp as gave_up:
            say("client", str(gave_up))
        truth = await ledger(demo)
    return verdict(truth == {"balance": 100, "charges": 1},
                   "timed out, told in progress, backed off, got the replay: one charge")


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------


def relies_on_deduplication(demo: Demo) -> bool:
    """C3, P14: read tools.idempotency from the server/discover result before relying on keys."""
    # The SDK's typed server_capabilities drops the field, so it is read as it came off the wire.
    if demo.link.discovered is None:
        say("client", f"the SDK negotiated {demo.client.protocol_version} without server/discover")
        return False
    advertised = demo.link.discovered.get("capabilities", {}).get("tools", {}).get("idempotency")
    say("client", f"server/discover → {demo.client.protocol_version}, "
                  f"capabilities.tools.idempotency = {json.dumps(advertised)}")
    return advertised == {}


async def play_over(transport: str, show_every_frame: bool) -> tuple[bool, list[bool]]:
    """The four scenarios over one transport: whether the failure showed, and each keyed scenario's verdict."""
    print(f"=== over {transport}\n")
    key = new_key()
    async with connect(transport, show_every_frame) as demo:
        if not relies_on_deduplication(demo):
            say("client", "the server does not advertise idempotency: refusing to rely on keys")
            return False, [False]
        say("client", "the server deduplicates by idempotencyKey: the client may rely on it\n")
        failure_shown = await no_key_double_charges(demo)
        required = [await key_deduplicates(demo, key), await conflicting_arguments_rejected(demo, key)]
    required.append(await slow_tool_retried_until_replayed(transport, show_every_frame))
    return failure_shown, required


async def play(transports: list[str], show_every_frame: bool) -> bool:
    """Run the scenarios over each transport; True if every failure was real and every keyed scenario passed."""
    print(f"SEP-3182 request idempotency on the current SDK, against the ledger server (mcp {version('mcp')})\n")
    failures_shown, required = [], []
    for transport in transports:
        shown, passed = await play_over(transport, show_every_frame)
        failures_shown.append(shown)
        required += passed
    print(f"The failure without a key is {'real' if all(failures_shown) else 'NOT shown'}, and {sum(required)} of "
          f"{len(required)} scenarios with SEP-3182 behaved as it requires, over {' and '.join(transports)}.")
    return all(failures_shown) and all(required)


def main() -> None:
    """Parse the options, play, and exit 0 only if every scenario passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], action="append",
                        help="play over this transport only (default: stdio, then http)")
    parser.add_argument("--wire", action="store_true", help="print every JSON-RPC frame in both directions")
    args = parser.parse_args()
    sys.exit(0 if anyio.run(play, args.transport or ["stdio", "http"], args.wire) else 1)


if __name__ == "__main__":
    main()
