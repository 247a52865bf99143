"""P20: a replay is the recorded outcome in the shape of the revision the retry speaks.

The 2.x server serves the 2026-07-28 revision and the 2025 handshake revisions side
by side, over one store. A 2026-07-28 result carries `resultType` and a serverInfo
stamp in `_meta` that 2025 results do not define, and the 2.x client rejects a
2026-07-28 result without `resultType`: a retry in the other revision must get the
same outcome, reshaped, never the other revision's bytes.
"""

import subprocess

import pytest
from wire import ROOT, sdk2_python, text_of

HANDSHAKE = "2025-11-25"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
ACKNOWLEDGED = {"com.example.sep3182/idempotency": {"idempotencyKey": "p20-a"}}  # P33, in any revision


def in_revision(wire, revision: str, amount: int, key: str) -> dict:
    """A keyed charge sent over HTTP in `revision` (stateless: no handshake needed on HTTP)."""
    wire.revision = revision
    return wire.charge(amount, key=key)


@pytest.mark.targets("2x-http")
def test_recorded_on_2026_replayed_to_a_2025_client_in_2025_shape(wire):
    original = in_revision(wire, "2026-07-28", 100, "p20-a")
    replay = in_revision(wire, HANDSHAKE, 100, "p20-a")

    assert original["result"]["resultType"] == "complete" and SERVER_INFO in original["result"]["_meta"]
    assert "resultType" not in replay["result"] and replay["result"]["_meta"] == ACKNOWLEDGED  # no serverInfo stamp
    assert replay["result"]["content"] == original["result"]["content"]
    assert replay["result"]["structuredContent"] == original["result"]["structuredContent"]
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.targets("2x-http")
def test_recorded_on_2025_replayed_to_a_2026_client_in_2026_shape(wire):
    original = in_revision(wire, HANDSHAKE, 100, "p20-b")
    replay = in_revision(wire, "2026-07-28", 100, "p20-b")

    assert "resultType" not in original["result"]
    assert replay["result"]["resultType"] == "complete"
    assert replay["result"]["_meta"][SERVER_INFO] == {"name": "sep-3182-demo", "version": "2.0"}
    assert replay["result"]["content"] == original["result"]["content"]
    assert wire.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.targets("2x-http")
def test_the_same_revision_replays_byte_for_byte(wire):
    wire.revision = HANDSHAKE
    first, second = (wire.raw_reply(wire.send_call("charge_guarded", {"amount": 100}, "p20-c")) for _ in range(2))

    assert first.replace('"id":2,', '"id":3,', 1) == second  # apart from the id (P6)


# The 2.x SDK's own client, on 2026-07-28, retrying a key first recorded on the 2025
# handshake: it validates every result against the revision it speaks.
SDK2_CLIENT_RETRY = """
import anyio, sys
from mcp import Client
import mcp_types
from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams
async def retry():
    async with Client(sys.argv[1], mode="auto") as client:
        params = KeyedCallParams(name="charge_guarded", arguments={"amount": 100}, idempotency_key="p20-d")
        call = KeyedCall(params=params)
        result = await client.session.send_request(call, mcp_types.CallToolResult, request_read_timeout_seconds=10)
        print(client.protocol_version, result.content[0].text)
anyio.run(retry)
"""


@pytest.mark.targets("2x-http")
def test_the_2x_sdk_client_accepts_a_replay_recorded_on_the_2025_handshake(wire):
    original = in_revision(wire, HANDSHAKE, 100, "p20-d")

    retried = subprocess.run(
        [sdk2_python(), "-c", SDK2_CLIENT_RETRY, f"http://127.0.0.1:{wire.port}/mcp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == f"2026-07-28 {text_of(original)}"
    assert wire.ledger() == {"balance": 100, "charges": 1}
