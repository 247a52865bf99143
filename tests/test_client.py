"""The package's client half (mcp_idempotency.client) on the stock mcp 2.x Client, in both placements: it reads
where the server takes the key from what the server advertises, sends one key per logical call there, and the
server deduplicates it. Each case is a real 2.x ledger server over stdio, the client in the 2.x environment."""

import json
import subprocess

import pytest
from wire import sdk2_python

CLIENT = """
import json, os, sys
import anyio
from mcp import Client, StdioServerParameters
from mcp_idempotency.client import KeyRefused, call_tool, discover_settings, new_key

async def main(command):
    async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="auto") as client:
        settings = await discover_settings(client)
        key = new_key()
        answers = [
            (await call_tool(client, "charge_guarded", {"amount": 7}, key=key, settings=settings)).content[0].text
            for _ in range(2)
        ]
        try:
            await call_tool(client, "charge_guarded", {"amount": 8}, key=key, settings=settings)
            conflict = None
        except KeyRefused as refused:
            conflict = refused.error.data["type"]
        ledger = json.loads((await client.call_tool("get_balance", {})).content[0].text)
        print(json.dumps({
            "placement": settings.placement.value,
            "settings": [settings.max_key_length, settings.retention_seconds, settings.deadline_seconds,
                         settings.lease_seconds],
            "answers": answers,
            "conflict": conflict,
            "charges": ledger["charges"],
        }), flush=True)
        os._exit(0)  # the verdict is out; the SDK's orderly stdio shutdown takes seconds more

anyio.run(main, sys.argv[1:])
"""


def played(*server_options: str) -> dict:
    """The client's report against a fresh 2.x ledger server started with `server_options`."""
    server = [sdk2_python(), "-m", "mcp_idempotency_demo.ledger_server", "--store", "memory", *server_options]
    ran = subprocess.run([sdk2_python(), "-c", CLIENT, *server], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.targets("2x-stdio")
@pytest.mark.parametrize("placement", ["params", "meta"])
def test_the_client_sends_the_key_where_the_server_reads_it_and_its_retry_replays_once_charged(placement):
    report = played("--placement", placement, "--max-key-length", "64", "--retention", "90", "--lease", "5")
    assert report["placement"] == placement  # read from the capability, wherever the server advertises it
    assert report["settings"] == [64, 90, 600, 5]  # and how long a key may be in progress: the deadline, the lease
    assert report["answers"][0] == report["answers"][1] == "Charged 7. New balance: 7"
    assert report["conflict"] == "idempotency_key_conflict" and report["charges"] == 1


@pytest.mark.targets("2x-stdio")
def test_the_client_fills_the_argument_the_tool_marks_and_its_retry_replays_once_charged():
    report = played("--placement", "argument", "--max-key-length", "64", "--retention", "90")
    assert report["placement"] == "argument"  # read from the tool list: this placement advertises no capability
    assert report["settings"] == [None] * 4  # the window is declared nowhere, so the client cannot bound by it
    assert report["answers"][0] == report["answers"][1] == "Charged 7. New balance: 7"
    assert report["conflict"] == "idempotency_key_conflict" and report["charges"] == 1


MODEL_FACING = """
import json
import mcp_types
from mcp_idempotency.client import model_facing
schema = {"type": "object", "properties": {"amount": {"type": "integer"},
          "idempotency_key": {"type": "string", "x-mcp-idempotency-key": True}},
          "required": ["amount", "idempotency_key"]}
plain = {"type": "object", "properties": {"idempotency_key": {"type": "string"}}}
tools = [mcp_types.Tool(name="charge", input_schema=schema), mcp_types.Tool(name="note", input_schema=plain)]
print(json.dumps([tool.input_schema for tool in model_facing(tools)]))
"""


def test_the_model_facing_tool_list_has_no_key_property_and_keeps_every_other():
    ran = subprocess.run([sdk2_python(), "-c", MODEL_FACING], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    charge, note = json.loads(ran.stdout)
    assert charge == {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}
    assert note == {"type": "object", "properties": {"idempotency_key": {"type": "string"}}}  # unmarked: kept
