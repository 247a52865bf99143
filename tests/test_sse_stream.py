"""P7 over an SSE response stream (2026-07-28): closing the stream is cancellation, and a client
whose stream broke sends the request again with a new JSON-RPC id.

The 2.x ledger server answers on SSE with --sse: a request's response stream is committed once
the tool sends a notification (the charge reports progress to a client that gave a progress
token). A keyed charge whose stream the client closes mid-charge runs to completion and is
recorded (P7); the client's new request, on a new connection to another instance on the same
store, gets the replay. Without a key, the same close cancels the charge.
"""

import http.client
import json

import pytest
from wire import sse_messages, start_together, text_of

pytestmark = pytest.mark.targets("2x-http")

KEY = "stream-1"
CHARGED = "Charged 100. New balance: 100"


@pytest.fixture
def two_instances(tmp_path):
    """Two SSE instances on one SQLite store; the first charges slowly, to close its stream mid-charge."""
    store = ("--store", f"sqlite:{tmp_path / 'store.db'}")
    wires = start_together("2x-http", ("--sse", "--charge-delay", "1", *store), ("--sse", *store))
    try:
        yield wires
    finally:
        for wire in wires:
            wire.close()


def test_a_charge_with_a_progress_token_streams_its_progress_and_its_replay_sends_the_outcome_alone(two_instances):
    _, second = two_instances
    streams = []
    for request_id in (1, 2):
        request = second.frame(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {
                    "name": "charge_guarded",
                    "arguments": {"amount": 100},
                    "idempotencyKey": KEY,
                    "_meta": {"progressToken": f"progress-{request_id}"},
                },
            }
        )
        connection = http.client.HTTPConnection("127.0.0.1", second.port, timeout=15)
        try:
            connection.request("POST", "/mcp", body=json.dumps(request), headers=second.headers(request))
            response = connection.getresponse()
            body = response.read().decode()
            sse = response.getheader("Content-Type", "").startswith("text/event-stream")
            streams.append(sse_messages(body) if sse else [json.loads(body)])
        finally:
            connection.close()

    original, replay = streams
    assert [message.get("method") for message in original] == ["notifications/progress", None]
    assert [message.get("method") for message in replay] == [None]  # S5: the outcome only
    assert text_of(replay[-1]) == text_of(original[-1]) == CHARGED


def test_a_keyed_call_whose_stream_is_closed_mid_charge_is_recorded_and_replays_on_another_instance(two_instances):
    first, second = two_instances
    request_id = first.send_call("charge_guarded", {"amount": 100}, key=KEY)
    first.wait_for_log(f"claimed: key={KEY!r}")
    first.cancel(request_id)  # the client closes the response stream mid-charge

    first.wait_for_log(f"recorded: key={KEY!r}")
    retried = second.charge(100, key=KEY)  # a new id, a new connection, another instance

    assert text_of(retried) == CHARGED
    assert second.ledger() == {"balance": 100, "charges": 1}


def test_an_unkeyed_call_whose_stream_is_closed_mid_charge_is_cancelled(two_instances):
    first, second = two_instances
    request_id = first.send_call("charge_unguarded", {"amount": 100})
    first.wait_for_log("no key: tool=charge_unguarded")
    first.cancel(request_id)

    second.charge(5, tool="charge_unguarded")
    assert first.ledger() == {"balance": 5, "charges": 1}  # asked after the cancelled charge's second ran out
