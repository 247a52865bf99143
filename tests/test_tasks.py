"""P24, L6, L7: Tasks (SEP-2663) under a key, and without one, on the 2.x ledger server with --tasks.

The tasks extension of 2026-07-28 has the server mint the task id, so a client whose
`CreateTaskResult` is lost and which sends the call again starts a second task: the
charge runs twice. With a key the layer, which sits outside Tasks, records the
`CreateTaskResult` as the key's outcome, committed with the task it names: a retry,
on any instance on the store, gets the same handle and polls it there; one task, one
charge. A lost answer is one the client never reads; the demo (ledger_demo.py) loses
it on a real link. Every verdict is read from the ledger, and the task count from
the store itself.
"""

import contextlib
import json
import sqlite3
import subprocess
import time

import pytest
from wire import ABSENT, ENVELOPE, SDK2_SERVER, new_key, sdk2_python, start, without_id

# The 2.x layer's rules, which the transport adds nothing to: the quick set plays them over HTTP, the slow set on stdio.
pytestmark = [pytest.mark.targets("2x-stdio", "2x-http"), pytest.mark.quick_targets("2x-http")]

EXTENSION = "io.modelcontextprotocol/tasks"
DECLARED = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}
TASKS = ("--tasks", "--charge-delay", "0.3")  # a charge long enough to be caught working
TERMINAL = {"completed", "failed", "cancelled"}
SETTLE = 15  # seconds a task may take to finish on a slow machine


def task_call(wire, amount: int, key=ABSENT, tool: str = "charge_guarded", declared: bool = True) -> dict:
    """A charge from a client that declares the tasks extension (or not), and its response."""
    return wire.call(tool, {"amount": amount}, key, **({"_meta": DECLARED} if declared else {}))


def task_request(wire, method: str, task_id, declared: bool = True) -> dict:
    """tasks/get, tasks/update or tasks/cancel for one task id (over HTTP with its Mcp-Name header)."""
    params = {"taskId": task_id, **({"_meta": DECLARED} if declared else {})}
    if method == "tasks/update":
        params["inputResponses"] = {}
    return wire.request(method, params)


def finished(wire, task_id: str) -> dict:
    """Poll tasks/get, as a client does, until the task reaches a terminal status; the task."""
    deadline = time.monotonic() + SETTLE
    while True:
        task = task_request(wire, "tasks/get", task_id)["result"]
        if task["status"] in TERMINAL:
            return task
        assert time.monotonic() < deadline, f"task {task_id} never finished: {task}"
        time.sleep(task["pollIntervalMs"] / 1000)


def ledger_after(wire, charges: int) -> dict:
    """The ledger once it holds `charges` charges (or after SETTLE seconds, whatever it holds then)."""
    deadline = time.monotonic() + SETTLE
    while wire.ledger()["charges"] < charges and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # long enough for one more charge to land, if one were still on its way
    return wire.ledger()


def tasks_in_store(path) -> list[str]:
    """Every task's status, read from the SQLite store file itself, not through a server."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [status for (status,) in db.execute("SELECT status FROM tasks")]


@pytest.fixture(scope="module")
def tasks_wire(target, tmp_path_factory):
    """One server with --tasks for the module's tests that read no ledger, only what a call or a task method answers:
    the tasks they leave working cannot change another's answer."""
    wire = start(target, *TASKS, store_dir=tmp_path_factory.mktemp(target))
    yield wire
    wire.close()


def instances(spawn, store_url: str, count: int = 2, *extra: str) -> list:
    """`count` instances with --tasks on one store (a SQLite file, or a PostgreSQL database)."""
    return [spawn(*TASKS, *extra, "--store", store_url) for _ in range(count)]


# ----------------------------------------------------------------------------
# Without a key, and with one
# ----------------------------------------------------------------------------


def test_without_a_key_a_resent_call_whose_task_handle_was_lost_runs_two_tasks_and_charges_twice(spawn):
    wire = spawn(*TASKS)
    lost = task_call(wire, 100)  # the CreateTaskResult the link dropped: the client never reads it
    assert lost["result"]["resultType"] == "task"
    resent = task_call(wire, 100)
    assert resent["result"]["taskId"] != lost["result"]["taskId"]  # the server minted another task
    assert finished(wire, resent["result"]["taskId"])["status"] == "completed"
    assert ledger_after(wire, 2) == {"balance": 200, "charges": 2}


def test_with_a_key_the_retry_on_another_instance_gets_the_same_task_handle_and_polls_it_there(spawn, store_url):
    first, second = instances(spawn, store_url)
    key = new_key()
    handle = task_call(first, 100, key)["result"]  # lost on its way back
    retried = task_call(second, 100, key)["result"]
    assert retried == handle  # the key's recorded outcome: the same task
    task = finished(second, retried["taskId"])  # polled where the retry landed
    assert task["status"] == "completed"
    assert task["result"]["content"][0]["text"] == "Charged 100. New balance: 100"
    assert ledger_after(second, 1) == {"balance": 100, "charges": 1}


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_task_is_durable_before_its_handle_is_answered_so_another_instance_finds_it_at_once(spawn, store_url, keyed):
    first, second = instances(spawn, store_url)
    task_id = task_call(first, 100, new_key() if keyed else ABSENT)["result"]["taskId"]
    at_once = task_request(second, "tasks/get", task_id)  # SEP-2663: no speculative poll needed
    assert at_once["result"]["status"] in ("working", "completed")
    assert finished(second, task_id)["status"] == "completed"


def test_the_layer_sees_the_call_before_tasks_so_retries_while_it_works_make_no_second_task(spawn, tmp_path):
    # The order, pinned: were Tasks outside the layer, every retry would get a task of its own.
    path = tmp_path / "store.db"
    [wire] = instances(spawn, f"sqlite:{path}", 1)
    key = new_key()
    handles = [task_call(wire, 100, key)["result"]["taskId"] for _ in range(3)]
    assert handles[0] == handles[1] == handles[2]
    assert tasks_in_store(path) in (["working"], ["completed"])  # one task, created with the key's record
    assert finished(wire, handles[0])["status"] == "completed"
    assert tasks_in_store(path) == ["completed"]
    assert ledger_after(wire, 1)["charges"] == 1


def test_a_replay_after_the_task_finished_is_the_same_handle_and_the_client_polls_it_for_the_result(spawn):
    wire = spawn(*TASKS)
    key = new_key()
    first_id = wire.send_call("charge_guarded", {"amount": 7}, key, _meta=DECLARED)
    first = without_id(wire.raw_reply(first_id), first_id)
    task = finished(wire, json.loads("{" + first)["result"]["taskId"])
    retry_id = wire.send_call("charge_guarded", {"amount": 7}, key, _meta=DECLARED)
    # The recorded handle, byte for byte, still saying "working": a replay is the handle
    # the key produced, not the task's state; that is tasks/get's, and it says completed.
    assert without_id(wire.raw_reply(retry_id), retry_id) == first
    assert finished(wire, task["taskId"]) == task
    assert ledger_after(wire, 1) == {"balance": 7, "charges": 1}


WINDOW, LEASE = 2, 1  # seconds: a task then lives 3 (P29)


def test_a_replayed_task_handle_never_outlives_its_task_which_is_gone_after_its_time_to_live(spawn):
    """P29: a task lives the key's window and a lease more. Polled every fifth of a second, each replay of the
    key's CreateTaskResult names a task tasks/get still finds; past the window the key is new, and runs a new
    task; past the time to live the first task is an unknown task."""
    wire = spawn(*TASKS, "--retention", str(WINDOW), "--lease", str(LEASE))
    key = new_key()
    first = task_call(wire, 100, key)["result"]
    began = time.monotonic()
    assert first["ttlMs"] == (WINDOW + LEASE) * 1000
    replays = 0
    while (answer := task_call(wire, 100, key)["result"])["taskId"] == first["taskId"]:
        assert "result" in task_request(wire, "tasks/get", first["taskId"]), "a replay named a task that is gone"
        replays += 1
        assert time.monotonic() - began < WINDOW + LEASE, "the key replayed past its window"
        time.sleep(0.2)
    assert replays >= WINDOW / 0.2 - 3  # replayed all along the window
    assert answer["taskId"] != first["taskId"] and answer["ttlMs"] == first["ttlMs"]  # the key, new: a new task
    time.sleep(max(0.0, began + WINDOW + LEASE + 0.2 - time.monotonic()))
    gone = task_request(wire, "tasks/get", first["taskId"])
    assert gone["error"]["code"] == -32602 and "Task not found" in gone["error"]["message"]
    assert "result" in task_request(wire, "tasks/get", answer["taskId"])  # the new one lives on


def test_a_keyed_retry_that_does_not_declare_the_extension_gets_32021_and_the_handle_stays_for_one_that_does(spawn):
    wire = spawn(*TASKS)
    key = new_key()
    handle = task_call(wire, 100, key)["result"]
    refused = task_call(wire, 100, key, declared=False)
    assert refused["error"]["code"] == -32021  # SEP-2663: never a task to a request that did not declare it
    assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    assert task_call(wire, 100, key)["result"] == handle  # the record is untouched
    finished(wire, handle["taskId"])
    assert ledger_after(wire, 1)["charges"] == 1


@pytest.mark.targets("2x-http")
def test_a_keyed_retry_on_the_2025_handshake_is_refused_never_a_task_and_the_handle_stays(spawn):
    # SEP-2663 defines no tasks on 2025-11-25, nor -32021 there: the layer cannot shape the
    # recorded task for that revision, and the SDK refuses it (-32602). Never a task, nothing runs.
    wire = spawn(*TASKS)
    key = new_key()
    handle = task_call(wire, 100, key)["result"]
    wire.revision = "2025-11-25"
    refused = task_call(wire, 100, key)
    assert "result" not in refused and refused["error"]["code"] == -32602
    wire.revision = "2026-07-28"
    assert task_call(wire, 100, key)["result"] == handle
    finished(wire, handle["taskId"])
    assert ledger_after(wire, 1)["charges"] == 1


def test_a_task_whose_arguments_fail_the_schema_completes_with_the_tools_error_and_charges_nothing(spawn):
    wire = spawn(*TASKS)
    task = finished(wire, task_call(wire, "a hundred", new_key())["result"]["taskId"])
    assert task["status"] == "completed" and task["result"]["isError"] is True  # SEP-2663: isError is completed
    assert ledger_after(wire, 0)["charges"] == 0


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_call_that_does_not_declare_the_extension_is_answered_at_once_never_as_a_task(tasks_wire, keyed):
    answer = task_call(tasks_wire, 100, new_key() if keyed else ABSENT, declared=False)
    assert answer["result"]["resultType"] == "complete"
    assert answer["result"]["content"][0]["text"].startswith("Charged 100. New balance: ")


def test_only_the_charges_run_as_tasks_and_only_with_tasks_on(spawn):
    with_tasks, without = spawn(*TASKS), spawn()
    assert with_tasks.capabilities["extensions"] == {EXTENSION: {}}
    assert EXTENSION not in without.capabilities.get("extensions", {})
    assert "taskId" not in with_tasks.call("get_balance", {}, _meta=DECLARED)["result"]
    assert task_call(without, 100)["result"]["resultType"] == "complete"
    assert task_request(without, "tasks/get", "any")["error"]["code"] == -32601


def test_tasks_on_the_memory_store_are_refused_in_one_line_before_anything_is_served():
    ran = subprocess.run(
        [sdk2_python(), *SDK2_SERVER, "--placement", "params", "--tasks", "--store", "memory"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0 and ran.stdout == ""
    assert "--tasks keeps its tasks in a SQL store" in ran.stderr


# ----------------------------------------------------------------------------
# The task methods' gates
# ----------------------------------------------------------------------------

METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


@pytest.mark.parametrize("method", METHODS)
def test_a_task_method_without_the_declaration_gets_32021(tasks_wire, method):
    task_id = task_call(tasks_wire, 100)["result"]["taskId"]
    assert task_request(tasks_wire, method, task_id, declared=False)["error"]["code"] == -32021


@pytest.mark.parametrize("method", METHODS)
def test_a_task_method_for_an_unknown_task_gets_32602(tasks_wire, method):
    assert task_request(tasks_wire, method, new_key())["error"]["code"] == -32602
    assert task_request(tasks_wire, method, 42)["error"]["code"] == -32602  # not even a task id


def test_the_cancel_of_a_finished_task_is_acknowledged_and_leaves_it_completed(spawn):
    wire = spawn(*TASKS)
    task = finished(wire, task_call(wire, 100, new_key())["result"]["taskId"])
    assert task_request(wire, "tasks/cancel", task["taskId"])["result"]["resultType"] == "complete"
    assert finished(wire, task["taskId"]) == task
    assert ledger_after(wire, 1)["charges"] == 1


def test_the_cancel_of_a_working_task_ends_it_cancelled_and_rolls_its_charge_back(spawn, store_url):
    first, second = instances(spawn, store_url, 2, "--charge-delay", "1.5")
    task_id = task_call(first, 100, new_key())["result"]["taskId"]
    assert task_request(second, "tasks/cancel", task_id)["result"]["resultType"] == "complete"  # another instance
    assert finished(first, task_id)["status"] == "cancelled"
    time.sleep(2)  # past the charge's delay: the work ran, found the cancel, and rolled back
    assert finished(first, task_id)["status"] == "cancelled"
    assert first.ledger()["charges"] == 0


def test_tasks_result_of_the_2025_design_is_method_not_found(tasks_wire):
    task_id = task_call(tasks_wire, 100)["result"]["taskId"]
    assert task_request(tasks_wire, "tasks/result", task_id)["error"]["code"] == -32601  # SEP-2663: removed


@pytest.mark.targets("2x-http")
def test_over_http_a_task_method_routed_to_another_task_is_refused_with_32020(tasks_wire):
    wire = tasks_wire
    task_id = task_call(wire, 100)["result"]["taskId"]
    message = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}
    message["params"]["_meta"] = {**ENVELOPE, **DECLARED}
    for name in ("another-task", None):  # SEP-2663: Mcp-Name carries params.taskId
        headers = {**wire.headers(message)}
        headers.pop("Mcp-Name")
        if name is not None:
            headers["Mcp-Name"] = name
        _, _, body = wire.post(json.dumps(message).encode(), headers)
        assert json.loads(body)["error"]["code"] == -32020
    assert finished(wire, task_id)["status"] == "completed"  # with the right header, it answers
