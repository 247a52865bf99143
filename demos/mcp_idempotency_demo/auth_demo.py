"""Whose key is it: SEP-3182's K2 and K3 over HTTP, with real OAuth tokens, across instances.

    sep3182-auth-demo                                        on one SQLite file
    sep3182-auth-demo --store postgresql://USER@HOST:PORT/DB  the same on PostgreSQL (an empty database)
    sep3182-auth-demo --server SCRIPT                        against another server script (the tests' stand-ins)

This script starts a real issuer (mcp_idempotency_demo/issuer.py: Authlib, client credentials, signed
JWT access tokens) and two instances, A and B, of the 2.x ledger server --issuer on one store;
then it is the load balancer between them. Alice and Bob each get their tokens from the
issuer and talk through the SDK's own Client (2026-07-28), with the token in the
Authorization header, through the harness's link, which can lose a response.
Every verdict is read from the ledger, which lives in the store beside the records.

    1. Alice's response from A is lost; her retry, on B, replays it: one charge.
    2. Bob sends Alice's key, with her arguments, to B: he is charged once, his own charge,
       and nothing he sees differs from what he would see had she never used it (K2).
    3. Alice retries her key on A with a token narrowed to ledger:read: 403, nothing
       disclosed; with a proper token, the replay (K3).
"""

import base64
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from .cluster_demo import hold_open
from .harness import (
    Link,
    ServerLog,
    call_tool,
    free_port,
    linked,
    listening,
    new_key,
    play_on_a_shared_store,
    say,
    send_charge,
    start_http_server,
    text,
    verdict,
)

ISSUER = ["-m", "mcp_idempotency_demo.issuer"]
RESOURCE = "https://ledger.example/mcp"  # the deployment, as its clients know it: every instance's `aud`


@dataclass
class Caller:
    """One person's token, and the SDK's Client speaking with it to one instance."""

    who: str
    instance: str
    client: Client
    link: Link
    refusals: list[str]  # the WWW-Authenticate challenges of the HTTP errors it got


class Deployment:
    """The issuer, instances of `server` on one store trusting it, and callers connected to them."""

    def __init__(self, folder: Path, store: str, server: list[str], connections: anyio.abc.TaskGroup):
        self.folder, self.store, self.server, self.connections = folder, store, server, connections
        self.processes: list[subprocess.Popen] = []
        self.urls: dict[str, str] = {}
        self.logs: dict[str, ServerLog] = {}
        self.issuer = ""

    async def start_issuer(self) -> None:
        """mcp_idempotency_demo/issuer.py on a free loopback port."""
        log = self.folder / "issuer.log"
        port = free_port()
        self.issuer = f"http://127.0.0.1:{port}"
        with log.open("w") as errlog:
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, *ISSUER, "--port", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=errlog,
                    stderr=errlog,
                )
            )
        await listening(self.processes[-1], self.issuer, log)
        say("issuer", f"serving {self.issuer}: clients alice and bob, scopes ledger:charge and ledger:read")

    async def start(self, name: str) -> None:
        """One instance of the 2.x ledger server, trusting the issuer, on the shared store."""
        log = self.folder / f"{name}.log"
        log.touch()
        process, url = start_http_server(
            self.server, ["--verbose", "--store", self.store, "--issuer", self.issuer, "--resource", RESOURCE], log
        )
        self.processes.append(process)
        await listening(process, url, log)
        self.urls[name], self.logs[name] = url, ServerLog(log, who=name)

    async def token(self, who: str, scope: str | None = None) -> str:
        """An access token for `who` by client credentials, for this deployment (RFC 8707 `resource`)."""
        form = {"grant_type": "client_credentials", "resource": RESOURCE, **({"scope": scope} if scope else {})}
        basic = base64.b64encode(f"{who}:{who}-secret".encode()).decode()
        async with httpx2.AsyncClient() as http:
            answer = (
                await http.post(f"{self.issuer}/token", data=form, headers={"Authorization": f"Basic {basic}"})
            ).json()
        say("issuer", f"← token for {who}: scope {answer['scope']}")
        return answer["access_token"]

    async def caller(self, who: str, instance: str, scope: str | None = None) -> Caller:
        """`who`, with a fresh token, speaking to `instance` through the SDK's Client."""
        refusals = []

        async def refused(response: httpx2.Response) -> None:
            """The SDK's client reports an HTTP error as -32603 only: the status and challenge, shown here."""
            if response.status_code >= 400:
                refusals.append(f"{response.status_code} {response.headers.get('www-authenticate')}")
                say("http", f"← {instance}: {refusals[-1]}")

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {await self.token(who, scope)}"}, event_hooks={"response": [refused]}
        )
        link = Link(self.logs[instance])
        client = Client(linked(streamable_http_client(self.urls[instance], http_client=http), link), mode="auto")
        await self.connections.start(hold_open, client)
        return Caller(who, instance, client, link, refusals)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait()


async def charge(caller: Caller, amount: int, key: str, lose_response: bool = False):
    """charge_guarded(amount) with `key`, sent by `caller` to its instance; the result, or the MCPError."""
    return await send_charge(caller.client, caller.link, amount, key, caller.who, caller.instance, lose_response)


async def ledger(reader: Caller) -> dict:
    """Ground truth from get_balance, read with a ledger:read token."""
    truth = json.loads(text(await call_tool(reader.client, "get_balance", {})))
    say("ledger", f"{truth['charges']} charge(s), balance {truth['balance']}")
    return truth


async def play(store: str | None, server: list[str]) -> bool:
    """The three scenarios; True if each behaved as SEP-3182's K2 and K3 require."""
    with tempfile.TemporaryDirectory() as folder:
        store = store or f"sqlite:{folder}/shared.db"
        print(f"SEP-3182 with OAuth: whose key is it; instances A and B share the store {store}\n")
        async with anyio.create_task_group() as connections:
            deployment = Deployment(Path(folder), store, server, connections)
            try:
                await deployment.start_issuer()
                await deployment.start("A")
                await deployment.start("B")
                reader = await deployment.caller("alice", "B", "ledger:read")
                key = new_key()

                print("\n1. Alice's response from A is lost; she retries on B, with the same key")
                alice_on_a, alice_on_b = await deployment.caller("alice", "A"), await deployment.caller("alice", "B")
                await charge(alice_on_a, 100, key, lose_response=True)
                retried = await charge(alice_on_b, 100, key)
                first = verdict(
                    not isinstance(retried, MCPError)
                    and alice_on_a.link.lost_result == alice_on_b.link.delivered_result
                    and await ledger(reader) == {"balance": 100, "charges": 1},
                    "Alice's lost response replayed for Alice, on the other instance: one charge",
                )

                print("2. Bob sends Alice's key, with her arguments, to B")
                bob = await deployment.caller("bob", "B")
                his = await charge(bob, 100, key)
                again = await charge(bob, 100, key)
                second = verdict(
                    not isinstance(his, MCPError)
                    and text(his) == "Charged 100. New balance: 200"
                    and not isinstance(again, MCPError)
                    and text(again) == text(his)
                    and await ledger(reader) == {"balance": 200, "charges": 2},
                    "Bob charged once, his own charge, then his own replay: nothing of Alice's "
                    "(her key is a new key for him)",
                )

                print("3. Alice retries her key on A with a token narrowed to ledger:read, then with a proper one")
                narrowed = await deployment.caller("alice", "A", "ledger:read")
                refused = await charge(narrowed, 100, key)
                proper = await deployment.caller("alice", "A")
                replayed = await charge(proper, 100, key)
                third = verdict(
                    isinstance(refused, MCPError)
                    and len(narrowed.refusals) == 1
                    and narrowed.refusals[0].startswith('403 Bearer error="insufficient_scope"')
                    and not isinstance(replayed, MCPError)
                    and text(replayed) == "Charged 100. New balance: 100"
                    and await ledger(reader) == {"balance": 200, "charges": 2},
                    "403 for the narrowed token, her result not disclosed; replayed for a proper one; "
                    "nothing charged again",
                )
            finally:
                connections.cancel_scope.cancel()
                deployment.stop()
    passed = [first, second, third]
    print(f"{sum(passed)} of {len(passed)} scenarios behaved as SEP-3182's K2 and K3 require.")
    return all(passed)


def main() -> None:
    """Parse the options, play, and exit 0 only if every scenario passed."""
    play_on_a_shared_store(play, __doc__ or "")


if __name__ == "__main__":
    main()
