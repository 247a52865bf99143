"""Tasks (SEP-2663) with and without an idempotencyKey: a lost task handle, for real, on two
instances of the 2.x ledger server (--tasks) that share one store (P24).

    sep3182-task-demo                         on one SQLite file
    sep3182-task-demo --store postgresql://USER@HOST:PORT/DB   the same on PostgreSQL
    sep3182-task-demo --server SCRIPT         against another server script (the tests' stand-ins)

In the 2026-07-28 tasks extension the server mints the task id, so the task handle
of the first Tasks design, which a client chose and could send again, is gone. The
client here is the SDK's own (mcp 2.x), declaring the extension on every request
(`advertise`); it charges on instance A, whose answer, the `CreateTaskResult`, the
harness's link loses after A sent it; the client times out and sends the call again
to instance B, and follows the task it gets there with `tasks/get` (the SDK sets the
Mcp-Name header from the request's `name_param`). Every verdict is read from the
ledger, in the store beside the records and the tasks.
"""

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams

from .cluster_demo import hold_open
from .harness import (
    LOST_RESPONSE_TIMEOUT,
    RESPONSE_TIMEOUT,
    TIMED_OUT,
    Link,
    ServerLog,
    call_tool,
    linked,
    listening,
    new_key,
    play_on_a_shared_store,
    say,
    short,
    start_http_server,
    text,
    verdict,
)
from .tasks import EXTENSION

CHARGE_DELAY = 1.0  # seconds a charge takes: longer than the client waits, so the retry finds the task working
TERMINAL = {"completed", "failed", "cancelled"}
POLLS = 100  # a bounded poll: at the server's 100 ms interval, ten seconds
ANY_RESULT = TypeAdapter(dict[str, Any])  # a tools/call answer that may be a task: the SDK has no type for it


class TaskParams(types.RequestParams):
    """tasks/get's params: the task to read."""

    task_id: str


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    """SEP-2663's tasks/get; `name_param` makes the SDK send the task id as the Mcp-Name header."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


@dataclass
class Instance:
    """One server process behind the load balancer, and the SDK's Client connected to it through a link."""

    name: str
    client: Client
    link: Link


async def start(name: str, folder: Path, store: str, server: list[str], connections: anyio.abc.TaskGroup) -> Instance:
    """Start one instance with --tasks on the shared store, and connect a Client that declares the extension."""
    log = folder / f"{name}.log"
    log.touch()
    process, url = start_http_server(
        server, ["--verbose", "--tasks", "--charge-delay", str(CHARGE_DELAY), "--store", store], log
    )
    connections.start_soon(stop_at_the_end, process)
    await listening(process, url, log)
    link = Link(ServerLog(log, who=name))
    client = Client(linked(streamable_http_client(url), link), mode="auto", extensions=[advertise(EXTENSION)])
    await connections.start(hold_open, client)
    return Instance(name, client, link)


async def stop_at_the_end(process: Any) -> None:
    """SIGTERM the instance when the demo ends."""
    try:
        await anyio.sleep_forever()
    finally:
        process.terminate()
        process.wait()


# ----------------------------------------------------------------------------
# A charge that may come back as a task, and the client that follows it
# ----------------------------------------------------------------------------


async def send_charge(to: Instance, tool: str, amount: int, key: str | None, lose: bool = False) -> dict | None:
    """A declaring tools/call of a charge; its answer (a CreateTaskResult here), or None if none came."""
    say("client", f"sends {tool}(amount={amount})" + (f", key {short(key)}" if key else ", no key") + f", to {to.name}")
    timeout = LOST_RESPONSE_TIMEOUT if lose else RESPONSE_TIMEOUT
    if lose:
        to.link.lose_next_response()
    request = KeyedCall(params=KeyedCallParams(name=tool, arguments={"amount": amount}, idempotency_key=key))
    try:
        answer = await to.client.session.send_request(request, ANY_RESULT, request_read_timeout_seconds=timeout)
    except MCPError as error:
        if error.code != TIMED_OUT:
            raise
        say("client", f"no answer within {timeout}s: it sends the call again, to the next instance")
        return None
    say("client", f"← {to.name}: resultType {answer.get('resultType')}, task {answer.get('taskId')}")
    return answer


async def follow(on: Instance, task_id: str) -> dict:
    """Poll tasks/get on one instance, at the interval the server asks for, until the task has finished."""
    for _ in range(POLLS):
        task = await on.client.session.send_request(GetTask(params=TaskParams(task_id=task_id)), ANY_RESULT)
        if task["status"] in TERMINAL:
            say("client", f"tasks/get on {on.name} → {task['status']}: {task['result']['content'][0]['text']!r}")
            return task
        await anyio.sleep(task["pollIntervalMs"] / 1000)
    raise TimeoutError(f"task {task_id} did not finish after {POLLS} polls")


async def ledger(on: Instance) -> dict:
    """Ground truth, once a task a lost answer started (at most one charge's time earlier) has finished too."""
    await anyio.sleep(CHARGE_DELAY)
    truth = json.loads(text(await call_tool(on.client, "get_balance", {})))
    say("ledger", f"{truth['charges']} charge(s), balance {truth['balance']} (read with get_balance)")
    return dict(truth)


# ----------------------------------------------------------------------------
# The two scenarios
# ----------------------------------------------------------------------------


async def lost_handle(a: Instance, b: Instance, key: str | None) -> tuple[dict | None, dict, dict, dict]:
    """Charge on A, lose its CreateTaskResult, send the call again to B and follow B's task: what A sent,
    what B answered, the task as it finished, and the ledger."""
    await call_tool(a.client, "reset_ledger", {})
    tool = "charge_guarded" if key else "charge_unguarded"
    await send_charge(a, tool, 100, key, lose=True)
    lost = a.link.lost_result  # as A sent it, before the link dropped it
    retried = await send_charge(b, tool, 100, key)
    if retried is None or "taskId" not in retried:
        raise RuntimeError(f"{b.name} answered no task: {retried}")
    return lost, retried, await follow(b, retried["taskId"]), await ledger(b)


async def without_a_key(a: Instance, b: Instance) -> bool:
    """Scenario 1: no key; the handle is lost, the call sent again: two tasks, two charges."""
    print("1. No key: the CreateTaskResult is lost, the client sends the call again, the customer pays twice")
    lost, retried, _, truth = await lost_handle(a, b, None)
    say("client", f"the lost answer named task {lost and lost.get('taskId')}; the new one names {retried['taskId']}")
    return verdict(
        truth == {"balance": 200, "charges": 2} and lost is not None and lost["taskId"] != retried["taskId"],
        "two tasks ran, one of them orphaned: the double charge a server-minted task id cannot prevent",
    )


async def with_a_key(a: Instance, b: Instance) -> bool:
    """Scenario 2: with a key; the retry on B gets the handle A recorded, and polls it on B: one task, one charge."""
    print("2. With an idempotencyKey: the same loss; the retry, on another instance, gets the same task handle")
    key = new_key()
    say("client", f"mints idempotencyKey {key} once, before the first attempt")
    lost, retried, task, truth = await lost_handle(a, b, key)
    same = lost == retried
    say("client", "the lost answer and the retry's compared whole: " + ("identical" if same else "NOT identical"))
    return verdict(
        truth == {"balance": 100, "charges": 1} and same and task["status"] == "completed",
        "one task, one charge; the retry got the recorded handle and followed it to its result on the other instance",
    )


async def play(store: str | None, server: list[str]) -> bool:
    """Start two instances on one store, play both scenarios; True if the failure showed and the key held."""
    print("SEP-3182 and Tasks (SEP-2663): a lost task handle, on two instances sharing one store\n")
    with tempfile.TemporaryDirectory() as folder:
        store = store or f"sqlite:{folder}/store.db"
        async with anyio.create_task_group() as connections:
            a = await start("A", Path(folder), store, server, connections)
            b = await start("B", Path(folder), store, server, connections)
            shown, held = await without_a_key(a, b), await with_a_key(a, b)
            connections.cancel_scope.cancel()
    print(
        "2 scenarios: without a key the lost handle "
        f"{'cost a second charge, as it must' if shown else 'did NOT cost a second charge'}; with SEP-3182, "
        f"{'one task and one charge' if held else 'NOT one task and one charge'}."
    )
    return shown and held


def main() -> None:
    """Parse the options, play, and exit 0 only if both scenarios passed."""
    play_on_a_shared_store(play, __doc__ or "")


if __name__ == "__main__":
    main()
