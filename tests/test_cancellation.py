"""P7: once a keyed execution starts it runs to completion and is recorded, whatever the client does.

The 2.x Python client sends `notifications/cancelled` on every timeout and then
retries under the same key with a new JSON-RPC id; these tests send exactly
that, by hand, to a server that is still charging.
"""

import time

import pytest
from wire import IN_PROGRESS, REPLY_TIMEOUT, error_type, new_key, text_of

KEY = "order-1"
CHARGED = "Charged 100. New balance: 100"


@pytest.fixture
def slow_server(spawn):
    """A server whose every charge takes a second, so a cancel finds the call still running."""
    return spawn("--charge-delay", "1")


@pytest.fixture
def timed_out_call(slow_server):
    """A server with a keyed charge in flight that the client has just cancelled."""
    request_id = slow_server.send_call("charge_guarded", {"amount": 100}, key=KEY)
    slow_server.wait_for_log(f"claimed: key={KEY!r}")  # claimed and charging
    slow_server.cancel(request_id)
    return slow_server


def test_cancelled_keyed_call_charges_once_and_is_recorded(timed_out_call):
    timed_out_call.wait_for_log(f"recorded: key={KEY!r}")
    assert timed_out_call.ledger() == {"balance": 100, "charges": 1}
    assert timed_out_call.alive()


def test_retry_after_cancel_is_in_progress_while_the_original_runs(timed_out_call):
    """The 2.x client's retry (same key, new id) must not start a second execution."""
    assert error_type(timed_out_call.charge(100, key=KEY)) == IN_PROGRESS
    timed_out_call.wait_for_log(f"recorded: key={KEY!r}")
    assert timed_out_call.ledger() == {"balance": 100, "charges": 1}


def test_retry_after_the_cancelled_run_completes_replays_its_result(timed_out_call):
    timed_out_call.wait_for_log(f"recorded: key={KEY!r}")
    assert text_of(timed_out_call.charge(100, key=KEY)) == CHARGED
    assert timed_out_call.ledger() == {"balance": 100, "charges": 1}
    assert timed_out_call.alive()


@pytest.mark.targets("1x-stdio", "2x-stdio")
def test_cancel_of_an_unkeyed_call_stops_it_and_the_server_serves_on(slow_server):
    """A client that goes away mid-call: mcp 1.21 to 1.26 died here (the floor, 1.29.1, does not)."""
    request_id = slow_server.send_call("charge_unguarded", {"amount": 100})
    # Requests are dispatched in the order they arrive, so once this one is
    # answered the charge has started its one-second delay.
    assert slow_server.alive()
    slow_server.cancel(request_id)

    assert slow_server.alive()
    # Balance 5, not 105: on stdio the cancel did stop the unkeyed charge mid-run,
    # which is the path that used to crash the server.
    assert text_of(slow_server.charge(5, tool="charge_unguarded")) == "Charged 5. New balance: 5"


@pytest.mark.targets("2x-http")
def test_client_closing_an_unkeyed_http_call_does_not_stop_it(slow_server):
    """Over HTTP with JSON responses the SDK lets a handler finish after its client has gone."""
    request_id = slow_server.send_call("charge_unguarded", {"amount": 100})
    slow_server.wait_for_log("no key: tool=charge_unguarded")  # handed to the tool: in its one-second delay
    slow_server.cancel(request_id)

    assert slow_server.alive()
    assert charges_within(slow_server, 1, REPLY_TIMEOUT) == {"balance": 100, "charges": 1}


def charges_within(wire, charges: int, timeout: float) -> dict:
    """The ledger once it holds `charges` charges, or as it stands when `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while (ledger := wire.ledger())["charges"] < charges and time.monotonic() < deadline:
        time.sleep(0.05)
    return ledger


@pytest.mark.targets("1x-stdio", "2x-stdio")
def test_client_leaving_mid_call_lets_the_call_finish_and_be_recorded(slow_server):
    """A client that closes stdin mid-call: the charge completes, is recorded, and the server exits cleanly."""
    slow_server.send_call("charge_guarded", {"amount": 100}, key=KEY)
    slow_server.wait_for_log(f"claimed: key={KEY!r}")

    assert slow_server.close() == 0
    log = slow_server.log()
    assert f"recorded: key={KEY!r}" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("which", ["finished", "unknown"])
def test_cancel_of_a_request_that_is_not_running_is_ignored(shared_wire, which):
    """A cancel for a finished request, or an id never sent, changes nothing: the key still replays."""
    key, before = new_key(), shared_wire.ledger()
    charged = f"Charged 100. New balance: {before['balance'] + 100}"
    finished = shared_wire.send_call("charge_guarded", {"amount": 100}, key=key)
    assert text_of(shared_wire.reply(finished)) == charged

    shared_wire.cancel(finished if which == "finished" else "no-such-request")
    assert shared_wire.alive()
    assert text_of(shared_wire.charge(100, key=key)) == charged
    assert shared_wire.ledger() == {"balance": before["balance"] + 100, "charges": before["charges"] + 1}
