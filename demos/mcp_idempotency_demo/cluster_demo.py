"""Several instances of the 2.x ledger server behind a load balancer: a retry that lands on another
instance, or after a crash, a restart or a closed response stream, still charges once, when the
instances share a store.

    sep3182-cluster-demo                        the eight scenarios, on one SQLite file
    sep3182-cluster-demo --store postgresql://USER@HOST:PORT/DB   the same on PostgreSQL
    sep3182-cluster-demo --server SCRIPT        against another server script (the tests' stand-ins)

This script is the load balancer: it starts real server processes over HTTP on
loopback ports, and sends each retry to a different instance than the attempt
before. Each instance is spoken to by the SDK's own Client (2026-07-28), through
the harness's link, which can lose a response after it was sent.
Every verdict is read from the ledger, which lives in the store beside the records.
"""

import json
import signal
import subprocess
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams
from mcp_idempotency.rules import CONFLICT, IN_PROGRESS

from .harness import (
    TIMED_OUT,
    GaveUp,
    Link,
    ServerLog,
    call_tool,
    call_until_answered,
    linked,
    listening,
    new_key,
    play_on_a_shared_store,
    rejection_type,
    say,
    send_charge,
    short,
    start_http_server,
    text,
    verdict,
)

SLOW_CHARGE = "1"  # seconds a charge takes in scenarios 4 and 8: long enough to retry, or close its stream, meanwhile
STREAM_PATIENCE = 0.3  # seconds the client waits in scenario 8 before it closes the stream: the charge has begun
SHORT_LEASE = "2"  # seconds in scenario 6: how long a dead instance's claim holds the key
CRASH_CHARGE = "30"  # seconds a charge takes on the instance killed mid-charge in scenario 6: it never finishes
BACK_OFF = 0.5  # seconds before the first retry of an in-progress key in scenario 6


@dataclass
class Instance:
    """One server process, and the SDK's Client connected to it through a link."""

    name: str
    store: str
    process: subprocess.Popen
    client: Client
    link: Link
    connection: anyio.CancelScope  # the task that holds the Client open

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup, no answer; what a crash or an OOM kill does."""
        self.connection.cancel()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, as an operator who restarts the instance does."""
        self.connection.cancel()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


class Cluster:
    """Instances of `server` started on one store, for the load balancer to send calls to."""

    def __init__(self, folder: Path, store: str, server: list[str], connections: anyio.abc.TaskGroup):
        self.folder, self.store, self.server, self.connections = folder, store, server, connections
        self.instances: list[Instance] = []

    async def start(self, name: str, *server_args: str, store: str | None = None, **client_options: Any) -> Instance:
        """Start one instance with its decision log on, and connect a Client to it (made with `client_options`)."""
        log = self.folder / f"{name}-{len(self.instances)}.log"
        log.touch()
        process, url = start_http_server(self.server, ["--verbose", "--store", store or self.store, *server_args], log)
        await listening(process, url, log)
        link = Link(ServerLog(log, who=name))  # the ledger demo shows the frames; here, the instances' decisions
        client = Client(linked(streamable_http_client(url), link), mode="auto", **client_options)
        connection = await self.connections.start(hold_open, client)
        self.instances.append(Instance(name, store or self.store, process, client, link, connection))
        return self.instances[-1]

    def latest(self, name: str) -> Instance:
        """The instance started last under `name`."""
        return [instance for instance in self.instances if instance.name == name][-1]

    def stop(self) -> None:
        """Stop every instance still running."""
        for instance in self.instances:
            instance.stop()


async def hold_open(client: Client, *, task_status) -> None:
    """Keep `client` connected, in a task of its own: when its server is killed, the
    Client's failure ends this task, never the load balancer's."""
    with anyio.CancelScope() as connection, suppress(Exception):
        async with client:
            task_status.started(connection)
            await anyio.sleep_forever()


async def paid(*instances: Instance) -> dict:
    """Ground truth: what the customer paid in all, read with get_balance from each ledger behind
    `instances` once (instances on one store share one ledger; a memory store is its instance's own)."""
    ledgers = {
        (instance.store, instance.name if instance.store == "memory" else ""): instance for instance in instances
    }
    total = {"balance": 0, "charges": 0}
    for (_, own), instance in ledgers.items():
        truth = json.loads(text(await call_tool(instance.client, "get_balance", {})))
        whose = f"{own}'s own ledger" if own else "the shared ledger"
        say(
            "ledger", f"{truth['charges']} charge(s), balance {truth['balance']}: {whose}, read through {instance.name}"
        )
        total = {name: total[name] + truth[name] for name in total}
    return total


async def charge(instance: Instance, amount: int, key: str, lose_response: bool = False, timeout: float | None = None):
    """charge_guarded(amount) with `key`, sent by the load balancer to `instance`; the result, or the MCPError."""
    return await send_charge(instance.client, instance.link, amount, key, "lb", instance.name, lose_response, timeout)


# ----------------------------------------------------------------------------
# The scenarios
# ----------------------------------------------------------------------------


async def per_instance_memory_charges_twice(cluster: Cluster) -> bool:
    """1: each instance remembers its own keys only, so a retry on another charges again (L2)."""
    print("1. Each instance has a store of its own (memory): the retry lands on B and charges again")
    a = await cluster.start("A", store="memory")
    b = await cluster.start("B", store="memory")
    key = new_key()
    await charge(a, 100, key, lose_response=True)
    await charge(b, 100, key)
    # With a store per instance, the ledger is per instance too: the customer pays the sum.
    return verdict(
        (await paid(a, b))["charges"] == 2,
        "the double charge happened, as it must with a store per instance (what rule L2 warns of): "
        "one intended charge, applied once on each instance",
    )


async def retry_on_another_instance_replays(cluster: Cluster, key: str) -> bool:
    """2: on a shared store, the retry on B finds A's record and replays it."""
    print("2. A shared store: the response from A is lost, the retry lands on B, which replays")
    a, b = await cluster.start("A"), await cluster.start("B")
    original = await charge(a, 100, key, lose_response=True)
    retried = await charge(b, 100, key)
    return verdict(
        isinstance(original, MCPError)
        and not isinstance(retried, MCPError)
        and a.link.lost_result == b.link.delivered_result
        and await paid(a, b) == {"balance": 100, "charges": 1},
        "one charge; B answered with A's recorded outcome, identical",
    )


async def conflict_on_another_instance(cluster: Cluster, key: str) -> bool:
    """3: the same key with other arguments, on another instance: a conflict."""
    print("3. The same key with other arguments, sent to B: rejected")
    a, b = cluster.latest("A"), cluster.latest("B")
    refused = await charge(b, 250, key)
    return verdict(
        isinstance(refused, MCPError)
        and rejection_type(refused) == CONFLICT
        and await paid(a, b) == {"balance": 100, "charges": 1},
        "conflict, nothing charged",
    )


async def in_progress_on_another_instance(cluster: Cluster) -> bool:
    """4: A still charging, the retry on B: in progress at once, and the replay once A is done."""
    print(f"4. A still running (each charge takes {SLOW_CHARGE}s), the retry lands on B: in progress at once")
    a = await cluster.start("A", "--charge-delay", SLOW_CHARGE)
    b = await cluster.start("B", "--charge-delay", SLOW_CHARGE)
    await call_tool(a.client, "reset_ledger", {})
    key = new_key()
    await charge(a, 100, key, timeout=0.3)  # A keeps charging after the client stops waiting
    refused = await charge(b, 100, key)
    await anyio.sleep(float(SLOW_CHARGE))
    replayed = await charge(b, 100, key)
    return verdict(
        isinstance(refused, MCPError)
        and rejection_type(refused) == IN_PROGRESS
        and not isinstance(replayed, MCPError)
        and await paid(a, b) == {"balance": 100, "charges": 1},
        "B refused at once while A ran, then replayed A's outcome: one charge",
    )


async def killed_after_commit_replays(cluster: Cluster) -> bool:
    """5: A killed right after its charge and record committed: its answer never came, B replays."""
    print("5. A killed (SIGKILL) right after its charge committed, its answer lost: the retry on B replays")
    a = await cluster.start("A")
    b = await cluster.start("B")
    await call_tool(a.client, "reset_ledger", {})
    key = new_key()
    await charge(a, 100, key, lose_response=True)
    a.kill()
    say("lb", "A is killed: SIGKILL, so nothing of it survives but what it committed to the store")
    replayed = await charge(b, 100, key)
    return verdict(
        not isinstance(replayed, MCPError) and await paid(b) == {"balance": 100, "charges": 1},
        "the record and the charge committed together, so B replays: one charge",
    )


async def killed_mid_charge_runs_once_after_the_lease(cluster: Cluster) -> bool:
    """6: A killed while charging: B says in progress until A's lease passes, then runs it once."""
    print(
        f"6. A killed (SIGKILL) in the middle of its charge: in progress until its lease ({SHORT_LEASE}s) "
        "passes, then the retry runs once"
    )
    a = await cluster.start("A", "--lease", SHORT_LEASE, "--charge-delay", CRASH_CHARGE)
    b = await cluster.start("B", "--lease", SHORT_LEASE)
    await call_tool(a.client, "reset_ledger", {})
    key = new_key()
    await charge(a, 100, key, timeout=0.3)
    a.kill()
    say("lb", "A is killed mid-charge: its claim stays behind in the store, its charge never committed")
    say("lb", f"sends charge_guarded(amount=100), key {short(key)}, to B until answered")
    try:
        answered = await call_until_answered(b.client, "charge_guarded", {"amount": 100}, key, "lb", BACK_OFF)
        say("lb", f"← B: {text(answered.result)}")
        waited = answered.retried[:1] == [IN_PROGRESS]
    except GaveUp as gave_up:
        say("lb", str(gave_up))
        waited = False
    return verdict(
        waited and await paid(b) == {"balance": 100, "charges": 1},
        "in progress while the lease held, then B took the key over and charged: one charge in all",
    )


async def restart_keeps_the_keys(cluster: Cluster, key: str) -> bool:
    """7: every instance stopped and started again: the key from scenario 2 still replays."""
    print("7. Every instance stopped (SIGTERM) and started again: the key from scenario 2 still replays")
    before = await paid(cluster.latest("B"))
    cluster.stop()
    say("lb", "every instance is stopped; two new ones start on the same store")
    await cluster.start("A")
    b = await cluster.start("B")
    replayed = await charge(b, 100, key)
    after = await paid(b)
    return verdict(
        not isinstance(replayed, MCPError) and text(replayed) == "Charged 100. New balance: 100" and after == before,
        "the records outlive the processes: replayed, nothing charged again",
    )


async def close_mid_charge(instance: Instance, tool: str, key: str | None) -> None:
    """A charge on `instance` that answers on an SSE stream, which the client closes once the charge has begun."""
    say("lb", f"sends {tool}(amount=100)" + (f", key {short(key)}" if key else ", no key") + f", to {instance.name}")

    async def progress(_done: float, _total: float | None, message: str | None) -> None:
        say("lb", f"← {instance.name}, on the request's SSE response stream: progress {message!r}")

    request = KeyedCall(params=KeyedCallParams(name=tool, arguments={"amount": 100}, idempotency_key=key))
    try:
        await instance.client.session.send_request(
            request, types.CallToolResult, request_read_timeout_seconds=STREAM_PATIENCE, progress_callback=progress
        )
    except MCPError as error:
        if error.code != TIMED_OUT:
            raise
    # On 2026-07-28 the SDK's HTTP transport gives up on a request by aborting its POST: it closes the stream.
    say("lb", f"no answer within {STREAM_PATIENCE}s: the client closes the response stream, mid-charge")
    await anyio.sleep(float(SLOW_CHARGE))  # the charge's whole time: whatever A does with it is done


async def closed_stream_runs_on_and_replays(cluster: Cluster) -> bool:
    """8: on SSE, a closed response stream is cancellation: an unkeyed charge stops; a keyed one runs on and
    is recorded (P7), and the retry, with a new id on a new connection to B, replays it."""
    print(
        f"8. Answers on SSE streams (--sse), each charge on A taking {SLOW_CHARGE}s: the client closes A's stream "
        "mid-charge, then sends the call again to B"
    )
    a = await cluster.start("A", "--sse", "--charge-delay", SLOW_CHARGE)
    b = await cluster.start("B", "--sse")
    await call_tool(a.client, "reset_ledger", {})
    say("lb", "first without a key, to show that the close reaches A as cancellation:")
    await close_mid_charge(a, "charge_unguarded", None)
    cancelled = await paid(b) == {"balance": 0, "charges": 0}
    say("lb", "then with a key:")
    key = new_key()
    await close_mid_charge(a, "charge_guarded", key)
    closed = a.link.last_request
    ran_on = await paid(b) == {"balance": 100, "charges": 1}
    retried = await charge(b, 100, key)  # the request again, as a new one: a new POST, on a new connection
    say(
        "lb",
        f"the closed request was id {closed} of A's client; the retry, id {b.link.last_request} of B's (each of "
        "the load balancer's clients numbers its own): the key matches them, never the id",
    )
    return verdict(
        cancelled and ran_on and not isinstance(retried, MCPError) and await paid(b) == {"balance": 100, "charges": 1},
        "the close stopped the unkeyed charge; the keyed one ran to completion and was recorded, and B replayed it: "
        "one charge",
    )


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------


async def play(store: str | None, server: list[str]) -> bool:
    """Run the scenarios; True if the failure is real and every shared-store scenario behaved as SEP-3182 requires."""
    with tempfile.TemporaryDirectory() as folder:
        store = store or f"sqlite:{folder}/shared.db"
        print(f"SEP-3182 with several instances; the shared store is {store}\n")
        async with anyio.create_task_group() as connections:
            cluster = Cluster(Path(folder), store, server, connections)
            failure_shown = await per_instance_memory_charges_twice(cluster)
            key = new_key()
            required = [
                await retry_on_another_instance_replays(cluster, key),
                await conflict_on_another_instance(cluster, key),
                await in_progress_on_another_instance(cluster),
                await killed_after_commit_replays(cluster),
                await killed_mid_charge_runs_once_after_the_lease(cluster),
                await restart_keeps_the_keys(cluster, key),
                await closed_stream_runs_on_and_replays(cluster),
            ]
            cluster.stop()
    # Scenario 1 shows the failure a shared store exists for; only the others are requirements: counted apart.
    print(
        f"{1 + len(required)} scenarios: with a store per instance the retry "
        f"{'charged twice, as it must' if failure_shown else 'did NOT charge twice'}; on a shared store, "
        f"{sum(required)} of {len(required)} behaved as SEP-3182 requires."
    )
    return failure_shown and all(required)


def main() -> None:
    """Parse the options, play, and exit 0 only if every scenario passed."""
    play_on_a_shared_store(play, __doc__ or "")


if __name__ == "__main__":
    main()
