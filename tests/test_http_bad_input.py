"""Requests a broken HTTP client might send to the 2.x server: each gets a clear HTTP or JSON-RPC
error, nothing runs, no key is claimed, and the server keeps serving.

Each row is a keyed charge_guarded call spoiled in one way. What the SDK answers was
found by running mcp 2.3.0; the rows pin it, so a change in the SDK shows up here.
"""

import json
from collections.abc import Callable

import pytest
from wire import ENVELOPE, new_key, text_of

TEN_MIB = 10 * 1024 * 1024


def keyed_call(key: str) -> dict:
    """The keyed charge_guarded call each row spoils."""
    params = {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": key, "_meta": ENVELOPE}
    return {"jsonrpc": "2.0", "id": "bad", "method": "tools/call", "params": params}


def as_sent(call: dict) -> bytes:
    """The call as a well-formed body."""
    return json.dumps(call).encode()


def spoiled(body: Callable[[dict], bytes] = as_sent, drop: str | None = None, **headers: str):
    """The keyed call written by `body`, with one header dropped or changed."""

    def request(wire, key: str) -> tuple[bytes, dict]:
        call = keyed_call(key)
        sent = {name: value for name, value in wire.headers(call).items() if name != drop}
        sent.update({name.replace("_", "-"): value for name, value in headers.items()})
        return body(call), sent

    return request


def padded(call: dict, size: int) -> bytes:
    """The call with an argument that makes its body `size` bytes or more."""
    arguments = {"amount": 100, "note": "x" * size}
    return json.dumps({**call, "params": {**call["params"], "arguments": arguments}}).encode()


ROWS = [
    pytest.param(spoiled(lambda call: b"charge 100 to an order"), 400, -32700, id="body-not-json"),
    pytest.param(spoiled(lambda call: as_sent(call)[:-2]), 400, -32700, id="body-truncated-json"),
    pytest.param(spoiled(Content_Type="text/plain"), 400, None, id="content-type-text-plain"),
    pytest.param(spoiled(drop="Accept"), 406, None, id="no-accept-header"),
    pytest.param(spoiled(MCP_Protocol_Version="2099-01-01"), 400, -32020, id="unknown-protocol-version"),
    pytest.param(spoiled(Mcp_Method="tools/list"), 400, -32020, id="method-header-mismatch"),
    pytest.param(spoiled(lambda call: json.dumps([call, call]).encode()), 400, -32600, id="batch"),
    pytest.param(spoiled(lambda call: padded(call, TEN_MIB)), 413, None, id="body-10-MiB"),
    pytest.param(
        spoiled(lambda call: as_sent({**call, "method": "tools/frobnicate"}), Mcp_Method="tools/frobnicate"),
        404,
        -32601,
        id="unknown-method",
    ),
]


# One server reads every row in turn, each row with a key of its own and the ledger read as a change: a request
# that broke the server, ran the charge or claimed the key fails its row.
@pytest.mark.targets("2x-http")
@pytest.mark.parametrize(("request_", "status", "error_code"), ROWS)
def test_bad_http_request_gets_a_clear_error_and_changes_nothing(shared_wire, request_, status, error_code):
    key, before = new_key(), shared_wire.ledger()
    body, headers = request_(shared_wire, key)

    answered, _, text = shared_wire.post(body, headers)

    assert answered == status
    if error_code is not None:
        assert json.loads(text)["error"]["code"] == error_code
    assert shared_wire.alive()
    assert shared_wire.ledger() == before
    # The key was not claimed: a proper call with it runs once, and then replays.
    charged = f"Charged 100. New balance: {before['balance'] + 100}"
    assert text_of(shared_wire.charge(100, key=key)) == charged
    assert text_of(shared_wire.charge(100, key=key)) == charged
    assert shared_wire.ledger() == {"balance": before["balance"] + 100, "charges": before["charges"] + 1}


@pytest.mark.targets("2x-http")
def test_request_without_a_protocol_version_header_is_served_as_2025_03_26(shared_wire):
    """Not an error: the MCP spec has a server assume 2025-03-26 when the header is missing, and the SDK
    does. Its key is honoured like any other; a retry on 2026-07-28 replays it in 2026-07-28's shape (P20)."""
    key, before = new_key(), shared_wire.ledger()
    call = keyed_call(key)
    headers = {name: value for name, value in shared_wire.headers(call).items() if name != "MCP-Protocol-Version"}

    status, _, text = shared_wire.post(as_sent(call), headers)
    retry = shared_wire.charge(100, key=key)

    assert status == 200 and "resultType" not in json.loads(text)["result"]  # a 2025 result
    assert retry["result"]["resultType"] == "complete"  # the same outcome, shaped for 2026-07-28
    assert text_of(retry) == json.loads(text)["result"]["content"][0]["text"]
    assert shared_wire.ledger() == {"balance": before["balance"] + 100, "charges": before["charges"] + 1}
