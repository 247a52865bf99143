"""Play SEP-3182's scenarios on the current SDK: an mcp 2.x client, on the 2026-07-28 revision,
against the 2.x ledger server over stdio and over Streamable HTTP, each checked against the ledger.

    sep3182-demo                    over stdio, then over HTTP
    sep3182-demo --transport http   one transport only
    sep3182-demo --wire             also print every JSON-RPC frame, both ways
    sep3182-demo --server SCRIPT    against another server script (the tests' stand-ins)

The client finds the capability through server/discover (the SDK's auto mode) and
relies on keys only if it is there. For HTTP the demo starts the server itself on
a free loopback port and stops it afterwards. A lost response is really lost: the
harness's link, between the SDK's client session and its transport, drops it
after the server sent it, so the client's timeout and retry are the SDK's own.
Of the capability's settings it honours maxKeyLength; its retries last seconds
against a 24-hour retentionSeconds, so only mcp_idempotency/client.py acts on the window.
"""

import argparse
import json
import sys
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_idempotency.rules import CONFLICT

from .harness import (
    FIELD,
    LOST_RESPONSE_TIMEOUT,
    RESPONSE_TIMEOUT,
    TIMED_OUT,
    GaveUp,
    Link,
    ServerLog,
    call_tool,
    call_until_answered,
    linked,
    listening,
    new_key,
    rejection_type,
    say,
    server_option,
    short,
    start_http_server,
    text,
    verdict,
)

SLOW_TOOL_DELAY = "1.2"  # seconds each charge takes in scenario 4: longer than the client's timeout


# ----------------------------------------------------------------------------
# The server, over stdio or HTTP, with its decision log on
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every connection of a run over one transport shares."""

    transport: str  # stdio or http
    show_every_frame: bool
    server: list[str]  # what follows the interpreter: the package's ledger server, or --server's script


@asynccontextmanager
async def http_server(server: list[str], server_args: list[str], log: Path):
    """`server` over Streamable HTTP on a free loopback port: its URL, until the block ends."""
    process, url = start_http_server(server, server_args, log)
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
async def connect(setup: Setup, *server_args: str):
    """Start the server on a fresh store, and connect the SDK's Client to it through a link."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        log.touch()
        arguments = ["--verbose", *FIELD, "--store", f"sqlite:{folder}/store.db", *server_args]
        link = Link(ServerLog(log), show_calls=True, show_every_frame=setup.show_every_frame)
        if setup.transport == "stdio":
            with log.open("w") as errlog:
                inner = stdio_client(
                    StdioServerParameters(command=sys.executable, args=[*setup.server, *arguments]), errlog=errlog
                )
                async with Client(linked(inner, link), mode="auto") as client:  # auto: server/discover first
                    yield Demo(client, link, setup.transport)
        else:
            async with (
                http_server(setup.server, arguments, log) as url,
                Client(linked(streamable_http_client(url), link), mode="auto") as client,
            ):
                yield Demo(client, link, setup.transport)


# ----------------------------------------------------------------------------
# Calls, as the walkthrough makes them
# ----------------------------------------------------------------------------


def how_the_client_gave_up(demo: Demo) -> str:
    """What the 2.x client does when it stops waiting, on this transport."""
    if demo.transport == "stdio":
        return "the 2.x client stops waiting and sends notifications/cancelled"
    return "the 2.x client stops waiting and closes the HTTP request"


async def ledger(demo: Demo) -> dict:
    """Ground truth from get_balance, printed: never trust a replayed text about the balance."""
    truth = json.loads(text(await call_tool(demo.client, "get_balance", {})))
    say(
        "ledger",
        f"{truth['charges']} charge(s), balance {truth['balance']} "
        f"(read with get_balance, request {demo.link.last_request})",
    )
    return truth


async def reset(demo: Demo) -> None:
    """Start a scenario from an empty ledger; the server keeps the keys it has recorded."""
    await call_tool(demo.client, "reset_ledger", {})
    say("client", f"resets the ledger to 0 (reset_ledger, request {demo.link.last_request}); recorded keys are kept")


async def charge_with_lost_response(demo: Demo, tool: str, amount: int, key: str | None) -> types.CallToolResult:
    """Charge once, lose the response, time out, and retry the very same call."""
    demo.link.lose_next_response()
    say("client", f"calls {tool}(amount={amount})" + (f" with idempotencyKey {short(key)}" if key else ", no key"))
    try:
        await call_tool(demo.client, tool, {"amount": amount}, key, LOST_RESPONSE_TIMEOUT)
    except MCPError as error:
        if error.code != TIMED_OUT:
            raise
        say(
            "client",
            f"no response within {LOST_RESPONSE_TIMEOUT}s; {how_the_client_gave_up(demo)}, then retries the same call",
        )
    result = await call_tool(demo.client, tool, {"amount": amount}, key)
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
    return verdict(
        truth == {"balance": 200, "charges": 2},
        "the double charge happened, as it must without a key: one intended charge of 100, applied twice",
    )


async def key_deduplicates(demo: Demo, key: str) -> bool:
    """Scenario 2: with a key, the same retry gets the original result and charges once."""
    print("2. With an idempotencyKey: the same lost response and retry, deduplicated")
    await reset(demo)
    say("client", f"mints idempotencyKey {key} once, before the first attempt")
    await charge_with_lost_response(demo, "charge_guarded", 100, key)
    lost, delivered = demo.link.lost_result, demo.link.delivered_result  # both as they came off the wire
    say("client", f"lost response: {lost['content'][0]['text']!r}; the retry's: {delivered['content'][0]['text']!r}")
    say(
        "client",
        "the two results compared whole: "
        + (
            "identical, the original outcome with no replay marker (P6; the SEP defines none, row S2b)"
            if lost == delivered
            else "NOT identical"
        ),
    )
    truth = await ledger(demo)
    return verdict(
        truth == {"balance": 100, "charges": 1} and lost == delivered,
        "one charge; the retry got the original outcome without running the tool again",
    )


async def conflicting_arguments_rejected(demo: Demo, key: str) -> bool:
    """Scenario 3: the same key with different arguments is rejected and charges nothing."""
    print("3. The same idempotencyKey with different arguments: rejected")
    say("client", f"reuses idempotencyKey {short(key)} for charge_guarded(amount=250)")
    try:
        await call_tool(demo.client, "charge_guarded", {"amount": 250}, key)
        rejected_as = None
    except MCPError as error:
        rejected_as = rejection_type(error)
        say("client", f"← error {error.code}: {error.message} (data.type {rejected_as})")
    truth = await ledger(demo)
    say("client", "retries the original call, amount=100, with the same key")
    original = await call_tool(demo.client, "charge_guarded", {"amount": 100}, key)
    say("client", f"← {text(original)}")
    unchanged = await ledger(demo)
    return verdict(
        rejected_as == CONFLICT and truth == unchanged == {"balance": 100, "charges": 1},
        "conflict rejected, nothing charged, and the original key still replays",
    )


async def slow_tool_retried_until_replayed(setup: Setup) -> bool:
    """Scenario 4: the usual retry: a tool slower than the client's timeout, retried with back-off."""
    print(
        f"4. A tool slower than the client's timeout (each charge takes {SLOW_TOOL_DELAY}s, "
        f"the client waits {RESPONSE_TIMEOUT}s)"
    )
    key = new_key()
    async with connect(setup, "--charge-delay", SLOW_TOOL_DELAY) as demo:
        say("client", f"calls charge_guarded(amount=100) with idempotencyKey {short(key)}, retrying until answered")
        try:
            answered = await call_until_answered(demo.client, "charge_guarded", {"amount": 100}, key)
            say("client", f"← {text(answered.result)}")
        except (GaveUp, MCPError) as stopped:
            return verdict(False, f"the client stopped without an answer: {stopped}")
        truth = await ledger(demo)
    return verdict(
        truth == {"balance": 100, "charges": 1}, "timed out, told in progress, backed off, got the replay: one charge"
    )


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------


def why_keys_unreliable(demo: Demo) -> str | None:
    """C3, P14, P11': read tools.idempotency, with its settings, from the server/discover result before relying on
    keys; why the client must not, or None."""
    # The SDK's typed server_capabilities drops the field, so it is read as it came off the wire.
    if demo.link.discovered is None:
        return f"the SDK negotiated {demo.client.protocol_version} without server/discover"
    advertised = demo.link.discovered.get("capabilities", {}).get("tools", {}).get("idempotency")
    say(
        "client",
        f"server/discover → {demo.client.protocol_version}, capabilities.tools.idempotency = {json.dumps(advertised)}",
    )
    if not isinstance(advertised, dict):
        return "the server does not advertise idempotency"
    ours = len(new_key())
    if advertised.get("maxKeyLength", ours) < ours:  # P11': the demo's keys are UUIDs; it would refuse every one
        return f"the server takes keys of at most {advertised['maxKeyLength']} characters, ours have {ours}"
    return None


async def play_over(setup: Setup) -> tuple[bool, list[bool]] | None:
    """The four scenarios over one transport: whether the failure showed, and each keyed scenario's verdict;
    None if the server does not advertise the capability, so none was played."""
    print(f"=== over {setup.transport}\n")
    key = new_key()
    async with connect(setup) as demo:
        refusal = why_keys_unreliable(demo)
        if refusal is not None:
            say("client", f"{refusal}: refusing to rely on keys")
            return None
        say("client", "the server deduplicates by idempotencyKey: the client may rely on it\n")
        failure_shown = await no_key_double_charges(demo)
        required = [await key_deduplicates(demo, key), await conflicting_arguments_rejected(demo, key)]
    required.append(await slow_tool_retried_until_replayed(setup))
    return failure_shown, required


async def play(transports: list[str], show_every_frame: bool, server: list[str]) -> bool:
    """Run the scenarios over each transport; True if every failure was real and every keyed scenario passed."""
    print(f"SEP-3182 request idempotency on the current SDK, against the ledger server (mcp {version('mcp')})\n")
    failures_shown, required = [], []
    for transport in transports:
        played = await play_over(Setup(transport, show_every_frame, server))
        if played is None:
            return False
        failures_shown.append(played[0])
        required += played[1]
    # Scenario 1 shows the failure SEP-3182 exists for; only the others are its requirements: counted apart.
    print(
        f"{len(failures_shown) + len(required)} scenarios over {' and '.join(transports)}: without a key the retry "
        f"{'charged twice, as it must' if all(failures_shown) else 'did NOT charge twice'}; with SEP-3182, "
        f"{sum(required)} of {len(required)} behaved as it requires."
    )
    return all(failures_shown) and all(required)


def main() -> None:
    """Parse the options, play, and exit 0 only if every scenario passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        action="append",
        help="play over this transport only (default: stdio, then http)",
    )
    parser.add_argument("--wire", action="store_true", help="print every JSON-RPC frame in both directions")
    server_option(parser)
    args = parser.parse_args()
    sys.exit(0 if anyio.run(play, args.transport or ["stdio", "http"], args.wire, args.server) else 1)


if __name__ == "__main__":
    main()
