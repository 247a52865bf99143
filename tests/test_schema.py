"""The JSON Schema of the SEP document's new and changed definitions (docs/schema/sep-3182.schema.json)
holds every real wire message here: the keyed requests our clients and the kit send, each server's
capability, and each server's every idempotency rejection, as the server wrote them."""

import json
import subprocess
from types import SimpleNamespace

import pytest
from jsonschema import Draft202012Validator
from kit_targets import kit
from wire import ROOT, sdk2_python

SCHEMA = json.loads((ROOT / "docs" / "schema" / "sep-3182.schema.json").read_text(encoding="utf-8"))


def problems(definition: str, value) -> list[str]:
    """What in `value` the schema's `definition` refuses; empty when it conforms."""
    validator = Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": SCHEMA["$defs"]})
    return [error.message for error in validator.iter_errors(value)]


def test_every_servers_capability_conforms(wire):
    assert problems("ServerCapabilitiesTools", wire.capabilities["tools"]) == []


def test_every_servers_every_rejection_conforms(spawn):
    server = spawn("--charge-delay", "1", "--max-records", "2")
    running = server.send_call("charge_guarded", {"amount": 100}, key="first")
    server.wait_for_log("claimed: key='first'")
    rejections = {
        "invalid_idempotency_key": server.charge(100, key=42),
        "idempotency_key_in_progress": server.charge(100, key="first"),
        "idempotency_key_conflict": server.charge(5, key="first"),
    }
    server.reply(running)
    server.charge(100, key="second")  # the store's two records: first and second
    rejections["idempotency_store_full"] = server.charge(100, key="third")

    for kind, response in rejections.items():
        assert response["error"]["data"]["type"] == kind
        assert problems("IdempotencyErrorResponse", response) == [], response


class Recording(kit.Connection):
    """The kit's connection, keeping what it would send instead of sending it."""

    def __init__(self):
        super().__init__(timeout=1)
        self.sent: list[dict] = []

    def send_text(self, text: str, request_id) -> None:
        self.sent.append(json.loads(text))


KEYED_CALL = """
from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams
call = KeyedCall(params=KeyedCallParams(name="charge_guarded", arguments={"amount": 100}, idempotency_key="k-1"))
print(call.model_dump_json(by_alias=True, exclude_none=True))
"""


def test_the_keyed_requests_our_clients_and_the_kit_send_conform():
    recording = Recording()
    kit.Server.send_call(SimpleNamespace(connection=recording), "charge_guarded", {"amount": 100}, "k-1")
    sdk_client = subprocess.run([sdk2_python(), "-c", KEYED_CALL], capture_output=True, text=True, check=True)

    [sent_by_the_kit] = recording.sent
    assert problems("CallToolRequest", sent_by_the_kit) == [], sent_by_the_kit
    params = json.loads(sdk_client.stdout)["params"]
    assert params["idempotencyKey"] == "k-1"
    assert problems("CallToolRequestParams", params) == [], params


@pytest.mark.parametrize("key", ["", "k" * 256, 42])
def test_the_schema_refuses_what_no_server_takes_as_a_key(key):
    params = {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": key}
    assert problems("CallToolRequestParams", params) != []
