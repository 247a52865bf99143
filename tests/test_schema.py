"""The JSON Schema of the field placement's core-schema change (extension/seps/appendix-params-field/
sep-3182.schema.json, which the SEP no longer asks for) holds every real wire message here in that placement:
the keyed requests our clients and the kit send, each server's capability, and each server's every
idempotency rejection, as the server wrote them. The rejections, and the 2.x server's settings in the
decided placement, are held to the extension's own generated schema (extension/schema/draft/schema.json) too.

The servers: 1.x, 2.x (stdio and HTTP) and the TypeScript server. The clients' requests are recorded on
their way to a real server (tests/recording_stdio.py), never written out by hand: client_demo.py's
(mcp 1.x), mcp_idempotency/client.py's and the 2.x KeyedCall's (through tests/compat_client.py), and the kit's."""

import json
import shutil
import sqlite3
from types import SimpleNamespace

import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from kit_targets import kit
from policy_clients import policy_client_report
from test_demo import play
from wire import ROOT, SDK2_SERVER, Wire, sdk2_python

SCHEMA = json.loads(
    (ROOT / "extension" / "seps" / "appendix-params-field" / "sep-3182.schema.json").read_text(encoding="utf-8")
)
EXTENSION_SCHEMA = json.loads((ROOT / "extension" / "schema" / "draft" / "schema.json").read_text(encoding="utf-8"))
RECORDER = ROOT / "tests" / "recording_stdio.py"


def problems(definition: str, value) -> list[str]:
    """What in `value` the schema's `definition` refuses; empty when it conforms."""
    validator = Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": SCHEMA["$defs"]})
    return [error.message for error in validator.iter_errors(value)]


def extension_problems(definition: str, value) -> list[str]:
    """What in `value` the extension's generated schema's `definition` refuses; empty when it conforms."""
    validator = Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": EXTENSION_SCHEMA["definitions"]})
    return [error.message for error in validator.iter_errors(value)]


def test_every_servers_capability_conforms(wire):
    assert problems("ServerCapabilitiesTools", wire.capabilities["tools"]) == []


def test_the_typescript_servers_capability_conforms(spawn_typescript):
    tools = spawn_typescript().capabilities["tools"]  # from its initialize result
    assert "idempotency" in tools
    assert problems("ServerCapabilitiesTools", tools) == []


# The server options each_rejection needs: a charge slow enough to send a repeat meanwhile, room for two records.
PROVOKING = ("--charge-delay", "1", "--max-records", "2")


def each_rejection(server: Wire) -> dict[str, dict]:
    """The four rejections every server makes, each provoked for real, by the type the server gave it."""
    running = server.send_call("charge_guarded", {"amount": 100}, key="first")
    server.wait_for_log("claimed: key='first'")
    rejections = [
        server.charge(100, key=42),  # invalid
        server.charge(100, key="first"),  # in progress
        server.charge(5, key="first"),  # conflict
    ]
    server.reply(running)
    server.charge(100, key="second")  # the store's two records: first and second
    rejections.append(server.charge(100, key="third"))  # store full
    return {response["error"]["data"]["type"]: response for response in rejections}


REJECTED_BY_EVERY_SERVER = {
    "invalid_idempotency_key",
    "idempotency_key_in_progress",
    "idempotency_key_conflict",
    "idempotency_store_full",
}


def test_every_servers_every_rejection_conforms(spawn):
    rejections = each_rejection(spawn(*PROVOKING))
    assert set(rejections) == REJECTED_BY_EVERY_SERVER
    for response in rejections.values():
        assert problems("IdempotencyErrorResponse", response) == [], response
        assert extension_problems("IdempotencyErrorResponse", response) == [], response


def test_the_typescript_servers_every_rejection_conforms(spawn_typescript):
    rejections = each_rejection(spawn_typescript(*PROVOKING))
    assert set(rejections) == REJECTED_BY_EVERY_SERVER
    for response in rejections.values():
        assert problems("IdempotencyErrorResponse", response) == [], response
        assert extension_problems("IdempotencyErrorResponse", response) == [], response


@pytest.mark.targets("2x-stdio", "2x-http")
def test_the_2x_servers_settings_in_the_decided_placement_conform_and_state_all_four(spawn):
    extensions = spawn("--placement", "meta").capabilities["extensions"]
    [settings] = [value for name, value in extensions.items() if name.endswith("/idempotency")]
    assert extension_problems("IdempotencySettings", settings) == [], settings
    assert set(settings) == {"maxKeyLength", "retentionSeconds", "deadlineSeconds", "leaseSeconds"}


@pytest.mark.targets("2x-stdio", "2x-http")
def test_the_2x_store_unavailable_rejection_conforms(spawn, tmp_path):
    """P23: another process holds the SQLite file's write lock past the store's wait (a third of the lease)."""
    path = tmp_path / "held.db"
    server = spawn("--store", f"sqlite:{path}", "--lease", "3")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a migration, a backup: the file is someone else's for now
    try:
        refused = server.charge(100, key="order-1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert refused["error"]["data"]["type"] == "idempotency_store_unavailable", refused
    assert problems("IdempotencyErrorResponse", refused) == [], refused
    assert extension_problems("IdempotencyErrorResponse", refused) == [], refused


class Recording(kit.Connection):
    """The kit's connection, keeping what it would send instead of sending it."""

    def __init__(self):
        super().__init__(timeout=1)
        self.sent: list[dict] = []

    def send_text(self, text: str, request_id) -> None:
        self.sent.append(json.loads(text))


def keyed_calls(record) -> list[dict]:
    """The keyed tools/call requests among the lines a recorder kept."""
    sent = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    return [
        message for message in sent if message.get("method") == "tools/call" and "idempotencyKey" in message["params"]
    ]


def test_the_keyed_requests_the_kit_sends_conform():
    recording = Recording()
    kit.Server.send_call(SimpleNamespace(connection=recording), "charge_guarded", {"amount": 100}, "k-1")

    [sent_by_the_kit] = recording.sent
    assert problems("CallToolRequest", sent_by_the_kit) == [], sent_by_the_kit


# client_demo.py starts `python SERVER --verbose ...`; this SERVER is server.py behind the recorder,
# which sits beside it (a script's own folder is where Python looks first).
SERVER_BEHIND_THE_RECORDER = """
import sys
from recording_stdio import relay
sys.exit(relay({record!r}, [sys.executable, {server!r}, *sys.argv[1:]]))
"""


def test_the_keyed_requests_client_demo_sends_conform(tmp_path):
    """mcp 1.x: scenario 2 sends a keyed charge and its retry, scenario 3 the conflict and the original again."""
    record, stand_in = tmp_path / "sent.jsonl", tmp_path / "recorded_server.py"
    shutil.copy(RECORDER, tmp_path)
    stand_in.write_text(SERVER_BEHIND_THE_RECORDER.format(record=str(record), server=str(ROOT / "server.py")))
    run = play(server=str(stand_in))
    assert run.returncode == 0, run.stdout + run.stderr

    sent = keyed_calls(record)
    assert len(sent) == 4, sent
    for request in sent:
        assert problems("CallToolRequest", request) == [], request


def test_the_keyed_requests_retry_policy_and_keyed_call_send_conform(tmp_path):
    """mcp 2.x, 2026-07-28: the SDK's Client sending KeyedCall twice, then the package client's call_tool twice."""
    record = tmp_path / "sent.jsonl"
    server = [
        sdk2_python(),
        str(RECORDER),
        str(record),
        "--",
        sdk2_python(),
        *SDK2_SERVER,
        "--placement",
        "params",
        "--store",
        "memory",
    ]
    report = policy_client_report("compat_client.py", "--", *server)
    assert report["policy"]["charges"] == 1  # the policy's second call replayed

    sent = keyed_calls(record)
    assert len(sent) == 4, sent
    for request in sent:
        assert problems("CallToolRequest", request) == [], request


@pytest.mark.parametrize("key", ["", "k" * 256, 42])
def test_the_schema_refuses_what_no_server_takes_as_a_key(key):
    params = {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": key}
    assert problems("CallToolRequestParams", params) != []
