"""Calls that overlap on one server (P4): at most one execution per key, however they race.

The server dispatches every request in its own task, so calls written together
really do run together; `--charge-delay` keeps the first one running while the
others arrive.
"""

import pytest
from wire import CONFLICT, IN_PROGRESS, ONE_PER_SDK, error_type, text_of

# Rules the transport adds nothing to: the quick set plays them on one real transport per SDK, the slow set on the rest.
pytestmark = pytest.mark.quick_targets(*ONE_PER_SDK)

CALLS = 50


@pytest.fixture
def slow_server(spawn):
    """A server whose every charge takes half a second, so calls written together overlap."""
    return spawn("--charge-delay", "0.5")


def answered_before(wire, request_id: int, key: str) -> bool:
    """Was the reply just read sent while `request_id` (holding `key`) was still running?"""
    return not wire.answered(request_id) and f"recorded: key={key!r}" not in wire.log()


def test_identical_keyed_calls_sent_at_once_charge_once(slow_server):
    """50 copies of one keyed call: one execution; every other copy is in progress or its replay."""
    ids = [slow_server.send_call("charge_guarded", {"amount": 100}, key="order-1") for _ in range(CALLS)]
    replies = [slow_server.reply(request_id) for request_id in ids]

    results = [reply["result"] for reply in replies if "result" in reply]
    in_progress = [reply for reply in replies if error_type(reply) == IN_PROGRESS]
    # Every copy is accounted for: the execution, a replay of it, or an in-progress rejection.
    assert len(results) + len(in_progress) == CALLS
    assert results, "no copy executed"
    # A replay (a copy that arrived after completion) is the executed result, not a second run.
    assert all(result == results[0] for result in results)
    assert results[0]["content"][0]["text"] == "Charged 100. New balance: 100"
    assert slow_server.ledger() == {"balance": 100, "charges": 1}
    assert slow_server.log().count("claimed: key='order-1'") == 1


def test_conflict_is_rejected_while_original_runs(slow_server):
    """P4.2: a key reused with other arguments is a conflict even before the original finishes."""
    first = slow_server.send_call("charge_guarded", {"amount": 100}, key="order-2")
    # Over HTTP each call has a connection of its own, so which lands first is not up to the
    # client: wait until the first holds the key.
    slow_server.wait_for_log("claimed: key='order-2'")
    second = slow_server.send_call("charge_guarded", {"amount": 250}, key="order-2")

    assert error_type(slow_server.reply(second)) == CONFLICT
    assert answered_before(slow_server, first, "order-2")
    assert text_of(slow_server.reply(first)) == "Charged 100. New balance: 100"
    assert slow_server.ledger() == {"balance": 100, "charges": 1}


def test_different_keys_sent_at_once_each_execute_once(slow_server):
    """Keys are independent: 50 distinct keys in flight together give 50 charges."""
    ids = {
        amount: slow_server.send_call("charge_guarded", {"amount": amount}, key=f"order-{amount}")
        for amount in range(1, CALLS + 1)
    }

    for amount, request_id in ids.items():
        # The balance in each text depends on the order they finish in; the amount does not.
        assert text_of(slow_server.reply(request_id)).startswith(f"Charged {amount}. New balance: ")
    assert slow_server.ledger() == {"balance": sum(ids), "charges": CALLS}


def test_in_progress_rejection_arrives_while_the_original_still_runs(spawn):
    """P4.3 (S1): a duplicate of a running call is rejected at once, never made to wait."""
    wire = spawn("--charge-delay", "2")
    original = wire.send_call("charge_guarded", {"amount": 100}, key="order-3")
    wire.wait_for_log("claimed: key='order-3'")  # the original holds the key and is charging

    duplicate = wire.send_call("charge_guarded", {"amount": 100}, key="order-3")
    rejected = wire.reply(duplicate)
    assert rejected["error"]["code"] == -32602  # P5: the shape a client branches on (S1a)
    assert rejected["error"]["data"] == {"type": IN_PROGRESS, "retryable": True, "idempotencyKey": "order-3"}
    assert answered_before(wire, original, "order-3")
    assert text_of(wire.reply(original)) == "Charged 100. New balance: 100"
    assert wire.ledger() == {"balance": 100, "charges": 1}
