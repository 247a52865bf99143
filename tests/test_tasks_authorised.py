"""SEP-2663 behind authorisation: a task is its principal's (K2 for tasks).

The 2.x ledger server with --tasks trusts the real issuer (tests/oauth.py) over HTTP, on a SQLite file and
on a PostgreSQL database (Tasks need a SQL store; on memory they are refused at start). Alice and Bob each
start a keyed task. Reading, polling (tasks/update) and cancelling the other's task by its id gets exactly
what a task id nobody holds gets, and leaves that task as it was: it runs on, completes, and charges once.
"""

import pytest
from oauth import as_caller, start_protected
from test_tasks import finished, task_call, task_request
from wire import new_key

pytestmark = pytest.mark.targets("2x-http")

TASKS = ("--tasks", "--charge-delay", "1")  # still working while the other principal tries its id
METHODS = ("tasks/get", "tasks/update", "tasks/cancel")


def as_if_unknown(wire, method: str, task_id: str) -> dict:
    """What `method` answers for an id nobody holds, written as if it had been asked for `task_id`."""
    nobodys = new_key()
    error = task_request(wire, method, nobodys)["error"]
    return {**error, "message": error["message"].replace(nobodys, task_id)}


def test_another_principals_task_is_an_unknown_task_to_read_poll_or_cancel_and_runs_on_untouched(issuer, store_url):
    alice, bob = issuer.token("alice"), issuer.token("bob")
    wire = start_protected(issuer, "--store", store_url, *TASKS, token=alice)
    try:
        alices = task_call(wire, 100, new_key())["result"]["taskId"]
        as_caller(wire, bob)
        bobs = task_call(wire, 5, new_key())["result"]["taskId"]
        for method in METHODS:  # Bob, by the id of Alice's task, while it works
            assert task_request(wire, method, alices)["error"] == as_if_unknown(wire, method, alices), method
        as_caller(wire, alice)
        for method in METHODS:  # and Alice by the id of Bob's
            assert task_request(wire, method, bobs)["error"] == as_if_unknown(wire, method, bobs), method
        assert finished(wire, alices)["status"] == "completed"  # not cancelled by Bob's tasks/cancel
        as_caller(wire, bob)
        assert finished(wire, bobs)["status"] == "completed"  # nor by Alice's
        assert wire.ledger() == {"balance": 105, "charges": 2}
    finally:
        wire.close()
