"""Requests a broken HTTP client might send to the 2.x server: each gets a clear HTTP or JSON-RPC
error, nothing runs, no key is claimed, and the server keeps serving.

Each row is a keyed charge_guarded call spoiled in one way. What the SDK answers was
found by running mcp 2.3.0; the rows pin it, so a change in the SDK shows up here.
"""

import json

import pytest
from wire import ENVELOPE, text_of

KEY = "http-order-1"
CALL = {
    "jsonrpc": "2.0",
    "id": "bad",
    "method": "tools/call",
    "params": {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": KEY, "_meta": ENVELOPE},
}
TEN_MIB = 10 * 1024 * 1024


def spoiled(body: bytes | None = None, drop: str | None = None, **headers: str):
    """The keyed call as `body` (default: the call itself), with one header dropped or changed."""

    def request(wire) -> tuple[bytes, dict]:
        sent = {name: value for name, value in wire.headers(CALL).items() if name != drop}
        sent.update({name.replace("_", "-"): value for name, value in headers.items()})
        return (json.dumps(CALL).encode() if body is None else body), sent

    return request


def padded(size: int) -> bytes:
    """The keyed call with an argument that makes its body `size` bytes or more."""
    arguments = {"amount": 100, "note": "x" * size}
    return json.dumps({**CALL, "params": {**CALL["params"], "arguments": arguments}}).encode()


ROWS = [
    pytest.param(spoiled(b"charge 100 to http-order-1"), 400, -32700, id="body-not-json"),
    pytest.param(spoiled(json.dumps(CALL).encode()[:-2]), 400, -32700, id="body-truncated-json"),
    pytest.param(spoiled(Content_Type="text/plain"), 400, None, id="content-type-text-plain"),
    pytest.param(spoiled(drop="Accept"), 406, None, id="no-accept-header"),
    pytest.param(spoiled(MCP_Protocol_Version="2099-01-01"), 400, -32020, id="unknown-protocol-version"),
    pytest.param(spoiled(Mcp_Method="tools/list"), 400, -32020, id="method-header-mismatch"),
    pytest.param(spoiled(json.dumps([CALL, CALL]).encode()), 400, -32600, id="batch"),
    pytest.param(spoiled(padded(TEN_MIB)), 413, None, id="body-10-MiB"),
    pytest.param(
        spoiled(json.dumps({**CALL, "method": "tools/frobnicate"}).encode(), Mcp_Method="tools/frobnicate"),
        404,
        -32601,
        id="unknown-method",
    ),
]


@pytest.mark.targets("2x-http")
@pytest.mark.parametrize(("request_", "status", "error_code"), ROWS)
def test_bad_http_request_gets_a_clear_error_and_changes_nothing(wire, request_, status, error_code):
    body, headers = request_(wire)

    answered, _, text = wire.post(body, headers)

    assert answered == status
    if error_code is not None:
        assert json.loads(text)["error"]["code"] == error_code
    assert wire.alive()
    assert wire.ledger() == {"balance": 0, "charges": 0}
    # The key was not claimed: a proper call with it runs once, and then replays.
    assert text_of(wire.charge(100, key=KEY)) == "Charged 100. New balance: 100"
    assert text_of(wire.charge(100, key=KEY)) == "Charged 100. New balance: 100"
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.targets("2x-http")
def test_request_without_a_protocol_version_header_is_served_as_2025_03_26(wire):
    """Not an error: the MCP spec has a server assume 2025-03-26 when the header is missing, and the SDK
    does. Its key is honoured like any other; a retry on 2026-07-28 replays it in 2026-07-28's shape (P20)."""
    headers = {name: value for name, value in wire.headers(CALL).items() if name != "MCP-Protocol-Version"}

    status, _, text = wire.post(json.dumps(CALL).encode(), headers)
    retry = wire.charge(100, key=KEY)

    assert status == 200 and "resultType" not in json.loads(text)["result"]  # a 2025 result
    assert retry["result"]["resultType"] == "complete"  # the same outcome, shaped for 2026-07-28
    assert text_of(retry) == json.loads(text)["result"]["content"][0]["text"]
    assert wire.ledger() == {"balance": 100, "charges": 1}
