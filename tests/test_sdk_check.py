"""P11, P12: the capability as the wire and the SDK client see it; the key the 1.x SDK client
sends; and the refusal to run on an SDK that would drop the key."""

import json
import subprocess
import sys
import tempfile
from importlib.metadata import version

import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from client_demo import call_tool
from conftest import sdk_session
from wire import REPLY_TIMEOUT, ROOT, SERVER


# ----------------------------------------------------------------------------
# P11: the capability
# ----------------------------------------------------------------------------


def test_initialize_result_advertises_idempotency_on_the_wire(wire):
    assert wire.initialize_result["capabilities"]["tools"]["idempotency"] == {}


@pytest.mark.anyio
async def test_sdk_client_reads_the_idempotency_capability():
    async with sdk_session() as session:
        assert session.initialize_result.capabilities.tools.model_extra == {"idempotency": {}}


# ----------------------------------------------------------------------------
# The 1.x SDK client puts the key where SEP-3182 does, and the server deduplicates it
# ----------------------------------------------------------------------------


def test_sdk_params_model_puts_the_key_beside_arguments():
    params = types.CallToolRequestParams(name="x", arguments={}, idempotencyKey="k")

    assert params.model_dump(by_alias=True, exclude_none=True) == {"name": "x", "arguments": {}, "idempotencyKey": "k"}


@pytest.mark.anyio
async def test_sdk_client_sends_the_key_beside_arguments_on_the_wire(tmp_path):
    # What the server read, byte for byte: its stdin passes through tee on the way in.
    received = tmp_path / "stdin.jsonl"
    params = StdioServerParameters(command="sh", args=["-c", 'tee "$0" | exec "$1" "$2"', str(received),
                                                       sys.executable, str(SERVER)])
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-wire-key", REPLY_TIMEOUT)

    calls = [message for message in map(json.loads, received.read_text().splitlines())
             if message.get("method") == "tools/call"]
    assert [call["params"] for call in calls] == [
        {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": "sdk-wire-key"}]


@pytest.mark.anyio
async def test_sdk_client_keyed_retry_is_deduplicated():
    async with sdk_session() as session:
        original = await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-retry-key", REPLY_TIMEOUT)
        retry = await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-retry-key", REPLY_TIMEOUT)
        ledger = json.loads((await session.call_tool("get_balance", {})).content[0].text)

    assert retry == original
    assert ledger == {"balance": 100, "charges": 1}


# ----------------------------------------------------------------------------
# P12: on an SDK that would drop the key, nothing runs
# ----------------------------------------------------------------------------

# Makes this interpreter's mcp behave like a build that ignores unknown params fields,
# as mcp 2.x does: the params model, the request, and ClientRequest, which is what the
# server's session validates every incoming request with, are rebuilt to drop the key.
DROP_THE_KEY = """
import mcp.types as t
t.CallToolRequestParams.model_config["extra"] = "ignore"
for model in (t.CallToolRequestParams, t.CallToolRequest, t.ClientRequest):
    model.model_rebuild(force=True)
"""

# What the server's session does with an incoming line: parse it, then validate the
# request as a ClientRequest; prints the params' extra fields as the server would see them.
PROBE = """
import json, mcp.types as t
line = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","arguments":{},"idempotencyKey":"k"}}'
message = t.JSONRPCMessage.model_validate_json(line).root.model_dump(by_alias=True, mode="json", exclude_none=True)
print(json.dumps(t.ClientRequest.model_validate(message).root.params.model_extra))
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    """This interpreter running `code`, from the project root, with nothing on stdin."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=REPLY_TIMEOUT)


def launch(script: str, drop_the_key: bool) -> subprocess.CompletedProcess:
    """Run one of the project's scripts as `python script` would, after the patch if asked."""
    path = str(ROOT / script)
    run = (f"import runpy, sys\nsys.path.insert(0, {str(ROOT)!r})\nsys.argv = [{path!r}]\n"
           f"runpy.run_path({path!r}, run_name='__main__')\n")
    return run_python((DROP_THE_KEY if drop_the_key else "") + run)


@pytest.mark.parametrize(("drop_the_key", "seen_by_the_server"), [
    pytest.param(False, {"idempotencyKey": "k"}, id="installed_sdk_keeps_the_key"),
    pytest.param(True, None, id="patched_sdk_drops_the_key"),
])
def test_the_simulation_really_drops_the_key(drop_the_key, seen_by_the_server):
    # The refusal tests below mean something only if the patch removes the key from what
    # the server would dispatch, and the unpatched SDK keeps it.
    probe = run_python((DROP_THE_KEY if drop_the_key else "") + PROBE)

    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == seen_by_the_server


def test_launcher_without_the_patch_serves():
    # The control: the same launcher, unpatched, starts the server (which exits at EOF).
    server = launch("server.py", drop_the_key=False)

    assert server.returncode == 0, server.stderr
    assert "idempotency: serving:" in server.stderr


@pytest.mark.parametrize("script", ["server.py", "client_demo.py"])
def test_refuses_to_run_when_the_sdk_drops_the_key(script):
    refused = launch(script, drop_the_key=True)

    assert refused.returncode != 0
    assert refused.stdout == ""  # nothing served, no demo played
    # Exactly one line on stderr (the check runs before FastMCP is imported, so not even
    # mcp 1.9.4's pydantic-settings IncompleteFieldDefinitionWarning appears).
    [line] = refused.stderr.splitlines()
    assert f"mcp {version('mcp')} drops idempotencyKey" in line  # the cause
    assert "pip install -r requirements.txt" in line  # the fix
