"""Play SEP-3182's scenarios against server.py over stdio, each checked against the ledger.

    python3 client_demo.py          1-3: no key, a key, the key reused with other arguments
    python3 client_demo.py --all    and 4-7: a duplicate while the original runs, a tool slower
                                    than the client's timeout, no key, a key past its window
    python3 client_demo.py --wire   also print every JSON-RPC frame, in both directions

The demo spawns server.py with the interpreter that runs it, so a virtual environment is honoured.
A lost response is really lost: a link between the SDK's client session and its stdio transport
drops it after the server sent it. The demo keeps its own link and retry loop, though the mcp 2.x
demos share theirs (mcp_idempotency_demo/harness.py): it is the reference, and must read alone.
Of the capability's settings it honours maxKeyLength (its retries last seconds, the window 24 hours).
"""

import argparse
import json
import sys
import tempfile
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

try:
    import anyio
    import mcp.types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import McpError
    from mcp.shared.message import SessionMessage
except ImportError as missing:  # P12: no SDK, a broken one, or mcp 2.x (it drops the key)
    if __name__ != "__main__":
        raise
    sys.exit(f"client_demo.py needs the mcp 1.x SDK, which this Python cannot import ({missing}); set it up with: "
             "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")

SERVER = Path(__file__).with_name("server.py")
RESPONSE_TIMEOUT = 0.5  # seconds; the server answers in milliseconds, so only a lost or slow response times out
IN_FLIGHT_DELAY = "1"  # seconds each charge takes in scenario 4: long enough to send a duplicate meanwhile
SLOW_TOOL_DELAY = "1.2"  # seconds each charge takes in scenario 5: longer than the client's timeout
SHORT_RETENTION = "1"  # seconds a key is kept in scenario 7, so the demo can outwait it
FIRST_BACK_OFF = 0.2  # seconds before retrying an in-progress key; doubled each time
ATTEMPTS = 6  # a retry loop is bounded: after this many tries the client reports failure
TIMED_OUT = 408  # the code of the McpError the 1.x client raises when it stops waiting (it sends no cancel)
KEY_LENGTH = len(str(uuid.uuid4()))  # 36: every key this client mints is a UUID (new_key)
LOG_POLL = 0.01  # seconds between looks at the server's log, so its lines show as they happen
HELPERS = {"get_balance", "reset_ledger"}  # the demo's own calls: narrated in a line of their own

# P5: why a call was rejected, error.data.type, as the wire carries it; whether to retry is data.retryable's (P5').
CONFLICT, IN_PROGRESS = "idempotency_key_conflict", "idempotency_key_in_progress"


def sdk_keeps_the_key() -> bool:
    """P12: does this mcp's client put an idempotencyKey beside the arguments? (mcp 2.x drops it)"""
    try:
        params = types.CallToolRequestParams(name="probe", arguments={}, idempotencyKey="probe")
    except Exception:  # a build whose params forbid unknown fields
        return False
    return params.model_dump(by_alias=True).get("idempotencyKey") == "probe"


# ----------------------------------------------------------------------------
# How the walkthrough prints: who says what, and the server's lines as it writes them
# ----------------------------------------------------------------------------


def say(who: str, text: str) -> None:
    """One line of the walkthrough, attributed to client, server, link or ledger."""
    print(f"  {who:<7}{text}", flush=True)


def short(key: str) -> str:
    """A key as the narration shows it: its first 8 characters. The frames show it whole."""
    return key[:8] + "…"


def verdict(ok: bool, claim: str) -> bool:
    """Print PASS or FAIL for one scenario's claim, and return whether it held."""
    print(f"  {'PASS' if ok else 'FAIL'}   {claim}\n", flush=True)
    return ok


def duration(seconds: str) -> str:
    """A window in the README's units: 24 h, 1 s."""
    return f"{float(seconds) / 3600:g} h" if float(seconds) >= 3600 else f"{float(seconds):g} s"


class ServerLog:
    """The server's stderr, in a file: its decision lines, printed in the order it writes them."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = 0  # how much of the file has been printed
        self.keys: set[str] = set()  # keys the client sent, to shorten in the server's lines

    def show(self) -> None:
        """Print the decision lines written since the last look, keys shortened."""
        with self.path.open() as log:
            log.seek(self.seen)
            text = log.read()
            self.seen = log.tell()
        for line in text.splitlines():
            # The server's own decisions: not SDK chatter, not its start (the client announces it in
            # the README's units), not about the demo's helper calls.
            if (line.startswith("idempotency: ") and not line.startswith("idempotency: serving:")
                    and not line.endswith(tuple(f"tool={name}" for name in HELPERS))):
                line = line.removeprefix("idempotency: ")
                for key in self.keys:
                    line = line.replace(repr(key), short(key))
                say("server", line)

    async def follow(self) -> None:
        """Show the server's lines as it writes them, not only when a frame comes back."""
        while True:
            self.show()
            await anyio.sleep(LOG_POLL)


def frame(message: types.JSONRPCMessage) -> str:
    """A JSON-RPC message as the stdio transport writes it on the wire."""
    return message.model_dump_json(by_alias=True, exclude_none=True)


# ----------------------------------------------------------------------------
# The link: the SDK's client session on one side, its stdio transport on the other
# ----------------------------------------------------------------------------


@dataclass
class Link:
    """Carries frames between session and transport; can lose a response; shows what it carries."""

    show_every_frame: bool
    server_log: ServerLog
    lose_next: bool = False  # lose the response to the next tools/call, after the server has sent it
    losing: set = field(default_factory=set)  # ids of requests whose response is to be lost
    lost_result: dict | None = None  # the result of the last response lost, as the server sent it
    delivered_result: dict | None = None  # the result of the last response delivered
    last_request: int | None = None  # the id of the last request sent, for the narration to name
    abandoned: set = field(default_factory=set)  # ids of requests the client stopped waiting for

    async def outbound(self, from_session, to_server) -> None:
        """Session to server: mark the request whose response is to be lost; show the tools/call frames."""
        async with from_session, to_server:
            async for message in from_session:
                request = message.message.root
                if isinstance(request, types.JSONRPCRequest):
                    self.last_request = request.id
                if isinstance(request, types.JSONRPCRequest) and request.method == "tools/call":
                    if self.lose_next:
                        self.losing.add(request.id)
                        self.lose_next = False
                    if "idempotencyKey" in request.params:
                        self.server_log.keys.add(request.params["idempotencyKey"])
                    if request.params["name"] not in HELPERS or self.show_every_frame:
                        say("wire →", frame(message.message))
                elif self.show_every_frame:
                    say("wire →", frame(message.message))
                await to_server.send(message)

    async def inbound(self, from_server, to_session) -> None:
        """Server to session: drop a response that is to be lost; deliver the rest."""
        async with from_server, to_session:
            async for message in from_server:
                if isinstance(message, SessionMessage):
                    # The server logs a decision before it answers, so its lines go first.
                    self.server_log.show()
                    reply = message.message.root
                    if self.show_every_frame:
                        say("wire ←", frame(message.message))
                    if isinstance(reply, types.JSONRPCResponse) and reply.id in self.losing:
                        self.losing.discard(reply.id)
                        self.lost_result = reply.result
                        say("link", f"✂ the response to request {reply.id} is lost on its way back")
                        continue
                    if isinstance(reply, types.JSONRPCResponse) and reply.id in self.abandoned:
                        self.abandoned.discard(reply.id)
                        say("link", f"← request {reply.id}'s answer arrives late: "
                                    f"{reply.result['content'][0]['text']!r}; the client gave up on it, so its "
                                    "session drops it (the retry is answered with the same outcome)")
                    elif isinstance(reply, types.JSONRPCResponse):
                        self.delivered_result = reply.result
                await to_session.send(message)


@dataclass
class Demo:
    """A running server.py and the client session talking to it through a link."""

    session: ClientSession
    link: Link


class KeysUnreliable(Exception):
    """The server's capability says a client must not rely on keys: it is absent, or takes shorter keys than ours."""


def why_keys_unreliable(initialized: types.InitializeResult) -> str | None:
    """C3, P11': read tools.idempotency, with its settings, from the initialize result before relying on keys."""
    tools = initialized.capabilities.tools
    advertised = (tools.model_extra or {}).get("idempotency") if tools else None
    say("client", f"initialize → capabilities.tools.idempotency = {json.dumps(advertised)}")
    if not isinstance(advertised, dict):
        return "the server does not advertise idempotency"
    if advertised.get("maxKeyLength", KEY_LENGTH) < KEY_LENGTH:  # P11': it would refuse every key we mint
        return f"the server takes keys of at most {advertised['maxKeyLength']} characters, ours have {KEY_LENGTH}"
    return None


@asynccontextmanager
async def connect(show_every_frame: bool, *server_args: str):
    """Spawn server.py with this interpreter, its decision log on, open a client session through a link,
    and check the capability before relying on keys (C3), as on every server the demo starts."""
    given = zip(server_args[::2], server_args[1::2], strict=True)  # the options come as name, value
    settings = {"--retention": str(24 * 3600), "--charge-delay": "0", **dict(given)}
    say("client", f"starts server.py, a new process with its own store: keys kept {duration(settings['--retention'])}, "
                  f"each charge takes {duration(settings['--charge-delay'])}")
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "--verbose", *server_args])
    with tempfile.TemporaryDirectory() as folder, (Path(folder) / "server.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (from_server, to_server):
            link = Link(show_every_frame, ServerLog(Path(errlog.name)))
            to_link, from_session = anyio.create_memory_object_stream(0)
            to_session, from_link = anyio.create_memory_object_stream(0)
            async with anyio.create_task_group() as pumps:
                pumps.start_soon(link.outbound, from_session, to_server)
                pumps.start_soon(link.inbound, from_server, to_session)
                pumps.start_soon(link.server_log.follow)
                async with ClientSession(from_link, to_link) as session:
                    refusal = why_keys_unreliable(await session.initialize())
                    if refusal is None:
                        yield Demo(session, link)
                pumps.cancel_scope.cancel()
    if refusal is not None:
        raise KeysUnreliable(refusal)


# ----------------------------------------------------------------------------
# Calls, as any SEP-3182 client makes them
# ----------------------------------------------------------------------------


def new_key() -> str:
    """A fresh idempotencyKey: a random UUID, as rule W5 advises, so keys never collide by chance."""
    return str(uuid.uuid4())


def tool_call(name: str, arguments: dict, key: str | None = None) -> types.CallToolRequest:
    """A tools/call request with the idempotencyKey, if any, beside `arguments` (W1)."""
    # The 1.x params model keeps an unknown field, so the key goes on the wire as
    # a sibling of `arguments`: exactly where SEP-3182 puts it.
    extra = {} if key is None else {"idempotencyKey": key}
    params = types.CallToolRequestParams(name=name, arguments=arguments, **extra)
    return types.CallToolRequest(method="tools/call", params=params)


async def call_tool(session: ClientSession, name: str, arguments: dict, key: str | None = None,
                    timeout: float = RESPONSE_TIMEOUT) -> types.CallToolResult:
    """Send a tools/call and wait at most `timeout` seconds for its result."""
    return await session.send_request(types.ClientRequest(tool_call(name, arguments, key)), types.CallToolResult,
                                      request_read_timeout_seconds=timedelta(seconds=timeout))


def rejection_type(error: McpError) -> str | None:
    """P5: why the server rejected the call, error.data.type; never the message, never the code alone."""
    return error.error.data.get("type") if isinstance(error.error.data, dict) else None


def retryable(error: McpError) -> bool:
    """P5': may the same request, sent later, succeed? The server's error.data.retryable says; nothing else."""
    return isinstance(error.error.data, dict) and error.error.data.get("retryable") is True


async def call_until_answered(demo: Demo, name: str, arguments: dict, key: str) -> types.CallToolResult:
    """Retry a keyed call as a client should: on a timeout, and on a rejection the server marks retryable
    (in progress, store full), backing off; any other rejection (a conflict, an invalid key) is final (P5')."""
    back_off = FIRST_BACK_OFF
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await call_tool(demo.session, name, arguments, key)
        except McpError as error:
            if error.error.code == TIMED_OUT:
                say("client", f"attempt {attempt}: no response within {RESPONSE_TIMEOUT}s; retrying with the same key")
                demo.link.abandoned.add(demo.link.last_request)
                continue
            if not retryable(error):
                say("client", f"attempt {attempt}: ← {rejection_type(error)}, not retryable: final")
                raise
            say("client", f"attempt {attempt}: ← {rejection_type(error)}, retryable; backing off {back_off:.1f}s")
            await anyio.sleep(back_off)
            back_off *= 2
    raise TimeoutError(f"no answer after {ATTEMPTS} attempts")  # the loop is bounded


def text(result: types.CallToolResult) -> str:
    """The text a tool answered with."""
    return result.content[0].text


async def ledger(demo: Demo) -> dict:
    """Ground truth from get_balance, printed: never trust a replayed text about the balance."""
    truth = json.loads(text(await call_tool(demo.session, "get_balance", {})))
    say("ledger", f"{truth['charges']} charge(s), balance {truth['balance']} "
                  f"(read with get_balance, request {demo.link.last_request})")
    return truth


async def reset(demo: Demo) -> None:
    """Start a scenario from an empty ledger; the server keeps the keys it has recorded."""
    await call_tool(demo.session, "reset_ledger", {})
    say("client", f"resets the ledger to 0 (reset_ledger, request {demo.link.last_request}); recorded keys are kept")


async def charge_with_lost_response(demo: Demo, tool: str, amount: int, key: str | None) -> types.CallToolResult:
    """Charge once, lose the response, time out, and retry the very same call."""
    demo.link.lose_next = True
    say("client", f"calls {tool}(amount={amount})" + (f" with idempotencyKey {short(key)}" if key else ", no key"))
    try:
        await call_tool(demo.session, tool, {"amount": amount}, key)
    except McpError as error:
        if error.error.code != TIMED_OUT:
            raise
        say("client", f"no response within {RESPONSE_TIMEOUT}s; the 1.x client stops waiting (it sends no cancel) "
                      "and retries the same call")
    result = await call_tool(demo.session, tool, {"amount": amount}, key)
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
                   "the double charge happened, as it must without a key: one intended charge of 100, applied twice")


async def key_deduplicates(demo: Demo, key: str) -> bool:
    """Scenario 2: with a key, the same retry gets the original result and charges once."""
    print("2. With an idempotencyKey: the same lost response and retry, deduplicated")
    await reset(demo)
    say("client", f"mints idempotencyKey {key} once, before the first attempt")
    await charge_with_lost_response(demo, "charge_guarded", 100, key)
    lost, delivered = demo.link.lost_result, demo.link.delivered_result  # both as they came off the wire
    say("client", f"lost response: {lost['content'][0]['text']!r}; the retry's: {delivered['content'][0]['text']!r}")
    say("client", "the two results compared whole: " + ("identical, the original outcome with no replay marker "
                                                        "(P6; the SEP defines none, row S2b)" if lost == delivered
                                                        else "NOT identical"))
    truth = await ledger(demo)
    return verdict(truth == {"balance": 100, "charges": 1} and lost == delivered,
                   "one charge; the retry got the original outcome without running the tool again")


async def conflicting_arguments_rejected(demo: Demo, key: str) -> bool:
    """Scenario 3: the same key with different arguments is rejected and charges nothing."""
    print("3. The same idempotencyKey with different arguments: rejected")
    say("client", f"reuses idempotencyKey {short(key)} for charge_guarded(amount=250)")
    try:
        await call_tool(demo.session, "charge_guarded", {"amount": 250}, key)
        rejected_as = None
    except McpError as error:
        rejected_as = rejection_type(error)
        say("client", f"← error {error.error.code}: {error.error.message} (data.type {rejected_as})")
    truth = await ledger(demo)
    say("client", "retries the original call, amount=100, with the same key")
    original = await call_tool(demo.session, "charge_guarded", {"amount": 100}, key)
    say("client", f"← {text(original)}")
    unchanged = await ledger(demo)
    return verdict(rejected_as == CONFLICT and truth == unchanged == {"balance": 100, "charges": 1},
                   "conflict rejected, nothing charged, and the original key still replays")


async def in_flight_duplicate_rejected(show_every_frame: bool) -> bool:
    """Scenario 4: a duplicate that arrives while the original runs is rejected at once (S1)."""
    print(f"4. A duplicate while the original is still running (each charge takes {IN_FLIGHT_DELAY}s)")
    key = new_key()
    async with connect(show_every_frame, "--charge-delay", IN_FLIGHT_DELAY) as demo:
        outcome = {}

        async def original():
            outcome["original"] = await call_tool(demo.session, "charge_guarded", {"amount": 100}, key, timeout=10)

        async with anyio.create_task_group() as calls:
            say("client", f"calls charge_guarded(amount=100) with idempotencyKey {short(key)}")
            calls.start_soon(original)
            await anyio.sleep(0.2)  # the original is now inside its slow charge
            say("client", "sends the same call again while the first is still charging")
            started = anyio.current_time()
            try:
                await call_tool(demo.session, "charge_guarded", {"amount": 100}, key)
                rejected_as = None
            except McpError as error:
                rejected_as = rejection_type(error)
                waited = (anyio.current_time() - started) * 1000
                say("client", f"← error {error.error.code}: {error.error.message} "
                              f"(data.type {rejected_as}, after {waited:.0f} ms, not held waiting)")
        say("client", f"← {text(outcome['original'])} (the original, once it finished)")
        retried = await call_tool(demo.session, "charge_guarded", {"amount": 100}, key)
        say("client", f"← {text(retried)} (the retry, after it finished)")
        truth = await ledger(demo)
    return verdict(rejected_as == IN_PROGRESS and text(retried) == text(outcome["original"])
                   and truth == {"balance": 100, "charges": 1},
                   "rejected at once while running, replayed once finished, charged once")


async def slow_tool_retried_until_replayed(show_every_frame: bool) -> bool:
    """Scenario 5: the usual retry: a tool slower than the client's timeout, retried with back-off."""
    print(f"5. A tool slower than the client's timeout (each charge takes {SLOW_TOOL_DELAY}s, "
          f"the client waits {RESPONSE_TIMEOUT}s)")
    key = new_key()
    async with connect(show_every_frame, "--charge-delay", SLOW_TOOL_DELAY) as demo:
        say("client", f"calls charge_guarded(amount=100) with idempotencyKey {short(key)}, retrying until answered")
        try:
            say("client", f"← {text(await call_until_answered(demo, 'charge_guarded', {'amount': 100}, key))}")
        except (TimeoutError, McpError) as stopped:
            return verdict(False, f"the client stopped without an answer: {stopped}")
        truth = await ledger(demo)
    return verdict(truth == {"balance": 100, "charges": 1},
                   "timed out, told in progress, backed off, got the replay: one charge")


async def guarded_tool_without_key_unchanged(demo: Demo) -> bool:
    """Scenario 6: a call without a key to charge_guarded behaves exactly as it always did."""
    print("6. No key to charge_guarded: backward compatible, every call runs")
    await reset(demo)
    for _ in range(2):
        say("client", "calls charge_guarded(amount=100), no key")
        say("client", f"← {text(await call_tool(demo.session, 'charge_guarded', {'amount': 100}))}")
    truth = await ledger(demo)
    return verdict(truth == {"balance": 200, "charges": 2}, "two calls without a key, two charges, as before SEP-3182")


async def expired_key_runs_anew(show_every_frame: bool) -> bool:
    """Scenario 7: once a key's retention window has passed, the key counts as new."""
    print(f"7. A key reused after its retention window ({SHORT_RETENTION}s here, 24 hours by default)")
    key = new_key()
    async with connect(show_every_frame, "--retention", SHORT_RETENTION) as demo:
        say("client", f"calls charge_guarded(amount=100) with idempotencyKey {short(key)}")
        say("client", f"← {text(await call_tool(demo.session, 'charge_guarded', {'amount': 100}, key))}")
        say("client", f"waits {float(SHORT_RETENTION) + 0.5}s, past the window, and sends the same call again")
        await anyio.sleep(float(SHORT_RETENTION) + 0.5)
        say("client", f"← {text(await call_tool(demo.session, 'charge_guarded', {'amount': 100}, key))}")
        truth = await ledger(demo)
    return verdict(truth == {"balance": 200, "charges": 2},
                   "the expired key ran anew: the window is bounded (R1, R5; 24 hours by default, P8)")


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------


async def play(show_all: bool, show_every_frame: bool) -> bool:
    """Run the scenarios; True if the failure is real and every keyed scenario behaved as SEP-3182 requires."""
    print(f"SEP-3182 request idempotency, against {SERVER.name} (mcp {version('mcp')})\n")
    key = new_key()
    try:
        async with connect(show_every_frame) as demo:
            say("client", "the server deduplicates by idempotencyKey: the client may rely on it")
            say("client", "(charge_unguarded and charge_guarded are one function: the name only labels which call "
                          "the demo sends with a key; the SEP has no per-tool opt-in, so either honours one)\n")
            failure_shown = await no_key_double_charges(demo)
            required = [await key_deduplicates(demo, key), await conflicting_arguments_rejected(demo, key)]
            if show_all:
                required += [await in_flight_duplicate_rejected(show_every_frame),
                             await slow_tool_retried_until_replayed(show_every_frame),
                             await guarded_tool_without_key_unchanged(demo),
                             await expired_key_runs_anew(show_every_frame)]
    except KeysUnreliable as refusal:
        say("client", f"{refusal}: refusing to rely on keys")
        return False
    print(f"{1 + len(required)} scenarios: without a key the retry "
          f"{'charged twice, as it must' if failure_shown else 'did NOT charge twice'}; with SEP-3182, "
          f"{sum(required)} of {len(required)} behaved as it requires.")
    return failure_shown and all(required)


def main() -> None:
    """Check the SDK, parse the options, play, and exit 0 only if every scenario passed."""
    if not sdk_keeps_the_key():
        sys.exit(f"mcp {version('mcp')} does not keep idempotencyKey in tools/call params, so the demo could not "
                 "send one; install the 1.x SDK this demo pins: pip install -r requirements.txt")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true",
                        help="also play 4-7: a duplicate in flight, a slow tool, no key, an expired key")
    parser.add_argument("--wire", action="store_true", help="print every JSON-RPC frame in both directions")
    args = parser.parse_args()
    sys.exit(0 if anyio.run(play, args.all, args.wire) else 1)


if __name__ == "__main__":
    main()
