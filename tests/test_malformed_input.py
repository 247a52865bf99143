"""Lines a broken client might write: the server survives each, charges nothing, and keeps its keys usable.

One server per target reads every row in turn (each row its own key, the ledger read as a change), so a line
that broke the server, or left a key claimed, fails its row and the ones after it.

What the SDK answers, found by running both ends of the supported range:

- mcp 1.x (the floor, 1.29.1, and 1.30.0) answers a tools/call whose params
  fail validation (no tool name) with JSON-RPC error -32602, before dispatch,
  so the idempotency layer never sees it.
- Neither SDK answers a line it cannot read as a JSON-RPC message (not JSON,
  truncated, "jsonrpc": "1.0", params as an array) nor a tools/call sent
  without an id: no response, with any id or with null. 1.30.0 does write a
  `notifications/message` log ("Internal Server Error") for the unreadable ones,
  but that is a notification, not an answer, so the assertions below hold
  without a version switch.
"""

import json

import pytest
from wire import new_key, text_of

BAD_ID = "bad"  # Wire numbers its own requests, so a string id cannot collide with one
INVALID_PARAMS = -32602


def call_line(wire, key: str | None = None, cut: int = 0, **changes) -> str:
    """A charge_guarded tools/call line as `wire`'s revision frames it: `changes` to the message, maybe a key,
    the last `cut` characters cut."""
    params = {"name": "charge_guarded", "arguments": {"amount": 100}}
    if key:
        params["idempotencyKey"] = key
    message = {**wire.frame({"jsonrpc": "2.0", "id": BAD_ID, "method": "tools/call", "params": params}), **changes}
    line = json.dumps(message)
    return line[: len(line) - cut]


def without_name(wire, key: str | None = None) -> str:
    """A tools/call whose params have arguments (and maybe a key) but no tool name."""
    params = {"arguments": {"amount": 100}, **({"idempotencyKey": key} if key else {})}
    return call_line(wire, params=wire.frame({"params": params})["params"])


def without_id(wire, key: str) -> str:
    """A keyed tools/call with no id: a notification, which tools/call cannot be."""
    message = json.loads(call_line(wire, key))
    del message["id"]
    return json.dumps(message)


# Each row: the line, written for a server and the key the row uses; the error code it gets (None: no answer).
ROWS = [
    pytest.param(lambda wire, key: f"charge 100 to {key}", None, id="not-json"),
    pytest.param(lambda wire, key: call_line(wire, cut=2), None, id="truncated-json"),
    pytest.param(lambda wire, key: call_line(wire, key, cut=2), None, id="truncated-json-with-key"),
    pytest.param(lambda wire, key: call_line(wire, jsonrpc="1.0"), None, id="jsonrpc-1.0"),
    pytest.param(lambda wire, key: call_line(wire, key, jsonrpc="1.0"), None, id="jsonrpc-1.0-with-key"),
    pytest.param(lambda wire, key: call_line(wire, params=["charge_guarded", {"amount": 1}]), None, id="params-array"),
    pytest.param(lambda wire, key: without_name(wire), INVALID_PARAMS, id="no-tool-name"),
    pytest.param(without_name, INVALID_PARAMS, id="no-tool-name-with-key"),
    pytest.param(without_id, None, id="keyed-call-without-id"),
]


@pytest.mark.targets("1x-stdio", "2x-stdio")
@pytest.mark.parametrize("line, error_code", ROWS)
def test_malformed_line_is_survived_and_charges_nothing(shared_wire, line, error_code):
    """The bad line gets `error_code` (None: no answer at all), runs nothing, and claims no key."""
    key, before = new_key(), shared_wire.ledger()
    shared_wire.send_line(line(shared_wire, key))

    # The next valid request is answered, so the server kept reading. Each
    # line is answered or dropped before the next is read, so any answer to
    # the bad line is already among the replies Wire read past meanwhile.
    assert shared_wire.alive()
    answers = {request_id: json.loads(reply)["error"]["code"] for request_id, reply in shared_wire.replies.items()}
    shared_wire.replies.clear()  # the next row starts with none
    assert answers == ({} if error_code is None else {BAD_ID: error_code})
    assert shared_wire.ledger() == before

    # The key works, once: had the bad line claimed it, this would be in progress forever.
    charged = f"Charged 100. New balance: {before['balance'] + 100}"
    assert text_of(shared_wire.charge(100, key=key)) == charged
    assert text_of(shared_wire.charge(100, key=key)) == charged
    assert shared_wire.ledger() == {"balance": before["balance"] + 100, "charges": before["charges"] + 1}
