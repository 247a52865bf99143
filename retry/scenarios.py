"""Why the key belongs in the protocol, shown: one retry policy, two unrelated tools, and every
other place a key could go, each failing for real.

    .venv-2x/bin/python retry/scenarios.py

The same policy (the package's client, mcp_idempotency.client) charges the ledger server's ledger and sends
retry/mail_server.py's e-mail, without knowing either tool's schema: through a
timeout, a lost response, a server killed mid-call, a full store, and it stops on
a conflict and an invalid key. Then the alternatives, against the same mail server:
a key in `arguments`, the `idempotentHint` annotation; then the key in `_meta` as an
extension (P26, a mail server started with `--placement meta`) beside the SEP's field. Every
verdict is read from ground truth (the ledger's `get_balance`, the mail server's
`outbox`), never from what a tool answered. Exit 0 only if every verdict holds.

Faults are real: the demos' link (mcp_idempotency_demo/harness.py), between the SDK's
client session and its transport, loses a response after the server sent it, and a
server process is killed by its pid.
"""

import json
import logging
import os
import signal
import sys
import tempfile
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from mcp_idempotency.client import TIMED_OUT, GaveUp, KeyRefused, Policy, call_tool, new_key
from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams
from mcp_idempotency.rules import EXTENSION_ID, META_KEY, Placement
from mcp_idempotency_demo.harness import LEDGER_SERVER, LOST_RESPONSE_TIMEOUT, Link, ServerLog, linked, say, verdict

MAIL = [str(Path(__file__).resolve().with_name("mail_server.py"))]  # an outbox, and the alternatives
TIMEOUT = 0.5  # seconds the client waits for each attempt; the servers answer in milliseconds
QUICK = Policy(timeout=TIMEOUT, attempts=8, first_back_off=0.2, max_back_off=1.0)  # a demo's seconds, not a day's
SLOW_CHARGE = "1.2"  # seconds a charge takes when one must outlast the client's timeout


# ----------------------------------------------------------------------------
# The servers, and what the policy says it did
# ----------------------------------------------------------------------------


@dataclass
class Server:
    """A server over stdio, started in a folder of its own: its command, options, decision logs and pid file."""

    command: list[str]  # what follows the interpreter: a script, or -m and a module
    args: list[str]
    folder: Path
    who: str = "server"
    starts: int = 0  # each start logs to a file of its own, so a dead server's lines are not shown twice

    def parameters(self) -> StdioServerParameters:
        """Start the script through sh, which writes the pid and becomes it, so a scenario can kill it."""
        command = [sys.executable, *self.command, "--verbose", *self.args]
        return StdioServerParameters(
            command="sh", args=["-c", 'echo $$ > "$0"; exec "$@"', str(self.pid_file), *command]
        )

    @property
    def pid_file(self) -> Path:
        """Where the running server's pid is."""
        return self.folder / "server.pid"

    @property
    def log(self) -> Path:
        """The current start's decision log (its stderr)."""
        return self.folder / f"server{self.starts}.log"

    def kill(self) -> None:
        """SIGKILL the server process, by the pid it wrote: it gets no chance to answer or record."""
        os.kill(int(self.pid_file.read_text()), signal.SIGKILL)


def new_server(command: list[str], args: list[str], folder: Path, name: str, who: str = "server") -> Server:
    """A server whose files live in a folder named for its scenario."""
    (folder / name).mkdir()
    return Server(command, args, folder / name, who)


@asynccontextmanager
async def connected(server: Server, **link_options):
    """The SDK's Client (mcp 2.x; server/discover, then 2026-07-28), talking to a new start of `server`."""
    server.starts += 1
    server.log.touch()
    link = Link(ServerLog(server.log, server.who), **link_options)
    with server.log.open("a") as errlog:
        transport = stdio_client(server.parameters(), errlog=errlog)
        async with Client(linked(transport, link), mode="auto") as client:
            yield client, link


class Narrated(logging.Handler):
    """Prints the policy's decisions as they happen, and keeps them for the verdicts."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        say("policy", record.getMessage())

    def saw(self, text: str) -> bool:
        """Did any decision since the last reset mention `text`?"""
        return any(text in line for line in self.lines)


policy_log = Narrated()
logging.getLogger("idempotency.client").addHandler(policy_log)
logging.getLogger("idempotency.client").setLevel(logging.INFO)
logging.getLogger("idempotency.client").propagate = False  # printed once, by Narrated


def structured(result: mcp_types.CallToolResult) -> dict:
    """A helper tool's answer: its structured content, or its text parsed as JSON."""
    return result.structured_content or json.loads(result.content[0].text)


def text(result: mcp_types.CallToolResult) -> str:
    """The text a tool answered with."""
    return result.content[0].text


async def answered(connection, name: str, arguments: dict, **options) -> str:
    """The policy's answer to one logical call, or why it had none (a scenario's verdict then fails)."""
    try:
        answer = text(await call_tool(connection, name, arguments, policy=QUICK, **options))
    except (GaveUp, KeyRefused) as failure:
        answer = f"no answer: {failure}"
    say("client", f"← {answer}")
    return answer


async def ledger(client: Client) -> dict:
    """Ground truth from the ledger server's get_balance."""
    truth = structured(await client.call_tool("get_balance", {}))
    say("ledger", f"{truth['charges']} charge(s), balance {truth['balance']}")
    return truth


async def outbox(client: Client) -> dict:
    """Ground truth from retry/mail_server.py's outbox."""
    truth = structured(await client.call_tool("outbox", {}))
    say("outbox", ", ".join(f"{count} {kind}" for kind, count in truth.items()))
    return truth


# ----------------------------------------------------------------------------
# The policy, on two unrelated tools
# ----------------------------------------------------------------------------


async def slow_charge(folder: Path) -> bool:
    """A charge slower than the client's timeout: timed out, told in progress, backed off, replayed."""
    print(f"1. The ledger (the ledger server): charge_guarded takes {SLOW_CHARGE}s, the client waits {TIMEOUT}s")
    policy_log.lines.clear()
    server = new_server(
        LEDGER_SERVER, ["--store", f"sqlite:{folder}/ledger.db", "--charge-delay", SLOW_CHARGE], folder, "slow"
    )
    async with connected(server) as (client, _):
        await answered(client.session, "charge_guarded", {"amount": 100})
        truth = await ledger(client)
    return verdict(
        truth == {"balance": 100, "charges": 1}
        and policy_log.saw("timed out")
        and policy_log.saw("idempotency_key_in_progress"),
        "one charge: the policy retried after the timeout and backed off while in progress",
    )


async def lost_email(folder: Path) -> bool:
    """The same policy on another tool: send_email's answer is lost; the retry gets the replay."""
    print("2. The outbox (retry/mail_server.py): send_email's answer is lost on its way back")
    policy_log.lines.clear()
    async with connected(new_server(MAIL, [], folder, "lost", "mail"), lose_next=True) as (client, _):
        await answered(
            client.session, "send_email", {"to": "ada@example.com", "subject": "Invoice", "body": "Attached."}
        )
        truth = await outbox(client)
    return verdict(
        truth["email"] == 1 and policy_log.saw("timed out"),
        "one e-mail: the same policy, on a tool whose schema it never read",
    )


async def killed_mid_charge(folder: Path) -> bool:
    """A lost connection: the server is killed mid-charge, a new one starts on the same store."""
    print("3. A lost connection: the ledger server is killed mid-charge; a new one starts on the same store")
    policy_log.lines.clear()
    server = new_server(
        LEDGER_SERVER,
        ["--store", f"sqlite:{folder}/restart.db", "--charge-delay", "1.0", "--lease", "1.5"],
        folder,
        "restart",
    )

    async def kill_once_claimed():
        """SIGKILL the server as soon as it has claimed the key, while it charges."""
        while "claimed:" not in server.log.read_text():
            await anyio.sleep(0.02)
        say("client", "kills the server (SIGKILL) while it charges: no answer, no record")
        server.kill()

    async with anyio.create_task_group() as group, AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(connected(server))]

        async def reconnect():
            """The caller's own reconnect: a new server process once the old one's side has closed."""
            if clients[-1][1].closed:
                say("client", "the connection is gone: starts the server again, on the same SQLite store")
                clients.append(await stack.enter_async_context(connected(server)))
            return clients[-1][0].session

        group.start_soon(kill_once_claimed)
        await answered(reconnect, "charge_guarded", {"amount": 100})
        truth = await ledger(clients[-1][0])
    reconnected = len(clients) == 2 and policy_log.saw("Connection closed")
    return verdict(
        truth == {"balance": 100, "charges": 1} and reconnected,
        "one charge: the policy reconnected, and the new server took the dead claim over once its lease passed",
    )


async def final_answers_then_full_store(folder: Path) -> bool:
    """A conflict and an invalid key: final, one attempt each. Then store full: back off until there is room."""
    print("4. Two final answers, then a store with room for one record: a new key waits for room")
    server = new_server(
        LEDGER_SERVER,
        ["--store", f"sqlite:{folder}/full.db", "--max-records", "1", "--retention", "1.5"],
        folder,
        "full",
    )
    async with connected(server) as (client, _):
        first = new_key()
        await answered(client.session, "charge_guarded", {"amount": 100}, key=first)
        refusals = []  # each answer, and how many attempts the policy made for it
        for key, amount in ((first, 250), ("k" * 256, 100)):  # the first key with another amount; too long a key
            policy_log.lines.clear()
            refusals.append(
                (await answered(client.session, "charge_guarded", {"amount": amount}, key=key), len(policy_log.lines))
            )
        policy_log.lines.clear()
        await answered(client.session, "charge_guarded", {"amount": 40})  # a new key: no room yet
        truth = await ledger(client)
    stopped = all(
        answer.startswith(f"no answer: {kind}") and attempts == 1
        for (answer, attempts), kind in zip(
            refusals, ["idempotency_key_conflict", "invalid_idempotency_key"], strict=True
        )
    )
    return verdict(
        stopped and policy_log.saw("idempotency_store_full") and truth == {"balance": 140, "charges": 2},
        "conflict and invalid key: stopped at once; store full: backed off until a record expired",
    )


# ----------------------------------------------------------------------------
# The alternatives, on the same mail server: the key anywhere but params
# ----------------------------------------------------------------------------


async def send_and_retry_once(client: Client, link: Link, request: mcp_types.CallToolRequest) -> str:
    """Lose the answer, time out, send the very same request again (no policy: one retry, whatever comes)."""
    link.lose_next_response()
    try:
        await client.session.send_request(
            request, mcp_types.CallToolResult, request_read_timeout_seconds=LOST_RESPONSE_TIMEOUT
        )
    except MCPError as error:
        if error.code != TIMED_OUT:
            raise
        say("client", f"no answer within {LOST_RESPONSE_TIMEOUT}s; sends the same request again")
    return text(await client.session.send_request(request, mcp_types.CallToolResult))


def call(name: str, arguments: dict, **params) -> mcp_types.CallToolRequestParams:
    """tools/call params, spelled as they go on the wire."""
    return mcp_types.CallToolRequestParams.model_validate({"name": name, "arguments": arguments, **params})


async def key_in_arguments(client: Client, link: Link) -> list[bool]:
    """A key in `arguments`: refused by a strict schema; under another tool's name for it, silently dropped."""
    print("5. A key in arguments")
    key = new_key()
    email = {"to": "ada@example.com", "subject": "Invoice", "body": "Attached.", "idempotencyKey": key}
    refusal = text(await client.call_tool("send_email", email))
    say(
        "client",
        f"send_email with idempotencyKey among its arguments ← {refusal.splitlines()[0]} "
        f"({refusal.splitlines()[2].strip()})",
    )
    truth = await outbox(client)
    refused = verdict(
        truth["email"] == 0,
        "refused by send_email's schema (additionalProperties: false): "
        "with a key there, the e-mail cannot be sent at all",
    )
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    say(
        "client",
        f"send_sms describes itself: {tools['send_sms'].description!r}; a generic client cannot know "
        "which argument of which tool is a key, so it tries the name it knows",
    )
    answer = await send_and_retry_once(
        client,
        link,
        mcp_types.CallToolRequest(
            params=call("send_sms", {"to": "+441632960000", "text": "Your code", "idempotencyKey": key})
        ),
    )
    say("client", f"← {answer}")
    truth = await outbox(client)
    invisible = verdict(
        truth["sms"] == 2, "under a generic client's name the key was dropped by the SDK, and the retry texted twice"
    )
    return [refused, invisible]


async def idempotent_hint(client: Client, link: Link) -> bool:
    """idempotentHint: true is a hint: the retry a client risks on its word runs the tool again."""
    print("6. The idempotentHint annotation")
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    say(
        "client",
        f"notify is annotated {tools['notify'].annotations.model_dump(by_alias=True, exclude_none=True)}"
        "; trusting it, the client retries without a key",
    )
    notify = mcp_types.CallToolRequest(params=call("notify", {"to": "ada", "text": "Shipped"}))
    say("client", f"← {await send_and_retry_once(client, link, notify)}")
    truth = await outbox(client)
    return verdict(truth["notification"] == 2, "no guarantee: the annotated tool ran twice")


def keyed_email(key: str, placement: Placement) -> mcp_types.CallToolRequest:
    """send_email with `key` where `placement` puts it: beside arguments (the SEP's), or in the _meta key."""
    arguments = {"to": "ada@example.com", "subject": "Invoice", "body": "Attached."}
    if placement is Placement.META:
        return mcp_types.CallToolRequest(params=call("send_email", arguments, _meta={META_KEY: key}))
    return KeyedCall(params=KeyedCallParams(name="send_email", arguments=arguments, idempotency_key=key))


async def placements(servers: dict[Placement, tuple[Client, Link]]) -> bool:
    """P26, both ways: a key in each placement, sent to a server in each; deduplicated exactly where they agree."""
    print("7. The key in _meta as an extension (--placement meta), beside the SEP's field: each key, each server")
    sent = {}  # (the server's placement, the key's placement) -> e-mails the lost answer and its retry sent
    for server_placement, (client, link) in servers.items():
        discovered = await client.session.send_discover(mcp_types.LATEST_PROTOCOL_VERSION)
        capabilities = discovered.get("capabilities", {})
        say(
            "client",
            f"the {server_placement.value} server advertises tools.idempotency: "
            f"{'idempotency' in capabilities.get('tools', {})}, extensions[{EXTENSION_ID!r}]: "
            f"{EXTENSION_ID in (capabilities.get('extensions') or {})}",
        )
        for key_placement in servers:
            say("client", f"send_email, its key in {key_placement.value}, to the {server_placement.value} server")
            before = (await outbox(client))["email"]
            say("client", f"← {await send_and_retry_once(client, link, keyed_email(new_key(), key_placement))}")
            sent[server_placement, key_placement] = (await outbox(client))["email"] - before
    for server_placement in servers:
        cells = ", ".join(f"key in {key.value}: {sent[server_placement, key]} e-mail(s)" for key in servers)
        say("outbox", f"{server_placement.value} server: {cells}")
    expected = {(server, key): 1 if server is key else 2 for server in servers for key in servers}
    return verdict(
        sent == expected,
        "where key and server agree, one e-mail in either placement; a key in the other place is no key: two",
    )


async def alternatives(folder: Path) -> list[bool]:
    """Scenarios 5-7 on mail servers: the key placed anywhere but params, then in _meta as an extension."""
    async with (
        connected(new_server(MAIL, ["--placement", "params"], folder, "alternatives", "mail")) as (client, link),
        connected(new_server(MAIL, ["--placement", "meta"], folder, "extension", "mail")) as extension,
    ):
        return [
            *await key_in_arguments(client, link),
            await idempotent_hint(client, link),
            await placements({Placement.PARAMS: (client, link), Placement.META: extension}),
        ]


async def play() -> bool:
    """Every scenario, each on fresh servers; True if every verdict held."""
    print("One retry policy (mcp_idempotency.client) on two unrelated tools, and the alternatives to a key in params\n")
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        verdicts = [
            await slow_charge(folder),
            await lost_email(folder),
            await killed_mid_charge(folder),
            await final_answers_then_full_store(folder),
            *await alternatives(folder),
        ]
    print(f"{sum(verdicts)} of {len(verdicts)} verdicts held.")
    return all(verdicts)


def main() -> None:
    """Play every scenario; exit 0 only if every verdict held."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    sys.exit(0 if anyio.run(play) else 1)


if __name__ == "__main__":
    main()
