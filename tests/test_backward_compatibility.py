"""Issue 25 item 5: a keyed call sent to servers WITHOUT the feature (plain mcp 2.x MCPServer, plain mcp 1.x
FastMCP) and to a STRICT one (unknown params members refused), through each client here: the 2.x SDK with
KeyedCall, mcp_idempotency/client.py, the kit's raw JSON-RPC, the mcp 1.x SDK's ClientSession (as client_demo.py sends
a key) and the TypeScript SDK's (1.x) client. docs/backward-compatibility.md tabulates it.

What is pinned: a server without the feature drops the key silently and runs the call every time (so a
retry charges twice), a strict one refuses it with -32602 and runs nothing; none declares the capability,
so a client that checks it first (C3) knows not to rely on keys before it sends one."""

import json
import subprocess
import sys

import pytest
from conftest import sdk_session
from kit_targets import kit
from mcp.shared.exceptions import McpError
from node_packages import INTEROP, npm_installed
from policy_clients import policy_client_report
from wire import REPLY_TIMEOUT, ROOT, sdk2_python

import client_demo

SERVERS = {
    "plain-2x": lambda: [sdk2_python(), str(ROOT / "tests/compat_servers/plain_2x.py")],
    "plain-1x": lambda: [sys.executable, str(ROOT / "tests/compat_servers/plain_1x.py")],  # .venv: mcp 1.x
    "strict": lambda: [sys.executable, str(ROOT / "tests/compat_servers/strict.py")],
}
WITHOUT_THE_FEATURE = ["plain-2x", "plain-1x"]


def sdk2_clients(server: str) -> dict:
    """The 2.x SDK's KeyedCall and mcp_idempotency/client.py against `server` (tests/compat_client.py's report)."""
    return policy_client_report("compat_client.py", "--", *SERVERS[server]())


def raw_client(server: str) -> dict:
    """The kit's raw JSON-RPC: the capability it finds, and one charge sent twice under one key."""
    connection = kit.Stdio(subprocess.list2cmdline(SERVERS[server]()), timeout=20)
    try:
        opening = kit.opened(connection, "auto")
        call = {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": kit.new_key()}
        answers = [connection.request("tools/call", call) for _ in range(2)]
        count = connection.request("tools/call", {"name": "get_balance", "arguments": {}})
        charges = kit.count_in(count["result"], "charges")
    finally:
        connection.close()
    return {
        "revision": opening["revision"],
        "capability": (opening["capabilities"].get("tools") or {}).get("idempotency"),
        "answers": answers,
        "charges": charges,
    }


@pytest.mark.parametrize("server", WITHOUT_THE_FEATURE)
def test_a_server_without_the_feature_drops_the_key_and_runs_every_retry_through_each_sdk2_client(server):
    report = sdk2_clients(server)
    assert report["capability"] is None  # C3: the policy's discover_settings finds nothing to rely on
    for client in ("KeyedCall", "policy"):
        assert report[client]["charges"] == 2, report  # the key dropped silently: the retry ran again
        assert all("result" in answer for answer in report[client]["answers"]), report


@pytest.mark.parametrize("server", WITHOUT_THE_FEATURE)
def test_a_server_without_the_feature_drops_the_key_sent_as_raw_json_rpc(server):
    report = raw_client(server)
    assert report["capability"] is None
    assert report["charges"] == 2 and all("result" in answer for answer in report["answers"]), report


def test_a_strict_server_refuses_the_keyed_call_with_invalid_params_through_each_sdk2_client():
    report = sdk2_clients("strict")
    assert report["capability"] is None
    for client in ("KeyedCall", "policy"):  # the policy does not retry it: -32602 without data.type is an answer
        assert report[client]["charges"] == 0, report
        assert [(answer.get("raised"), answer.get("code")) for answer in report[client]["answers"]] == [
            ("MCPError", -32602)
        ] * 2, report


def test_a_strict_server_refuses_the_keyed_call_sent_as_raw_json_rpc():
    report = raw_client("strict")
    assert report["capability"] is None and report["charges"] == 0
    assert [answer.get("error", {}).get("code") for answer in report["answers"]] == [-32602, -32602], report
    assert all("idempotencyKey" in answer["error"]["message"] for answer in report["answers"])


async def sdk1_client(server: str) -> dict:
    """The mcp 1.x SDK's ClientSession, the key put beside `arguments` as client_demo.py puts it: the capability
    it finds in initialize, and one charge sent twice under one key."""
    async with sdk_session(command=SERVERS[server]()) as session:
        tools = session.initialize_result.capabilities.tools
        key, answers = client_demo.new_key(), []
        for _ in range(2):
            try:
                charged = await client_demo.call_tool(session, "charge_guarded", {"amount": 100}, key, REPLY_TIMEOUT)
                answers.append({"result": client_demo.text(charged)})
            except McpError as error:
                answers.append({"code": error.error.code, "message": error.error.message})
        count = await client_demo.call_tool(session, "get_balance", {}, timeout=REPLY_TIMEOUT)
    return {
        "capability": (tools.model_extra or {}).get("idempotency") if tools else None,
        "answers": answers,
        "charges": json.loads(client_demo.text(count))["charges"],
    }


@pytest.mark.anyio
@pytest.mark.parametrize("server", WITHOUT_THE_FEATURE)
async def test_a_server_without_the_feature_drops_the_key_sent_by_the_sdk1_client_session(server):
    report = await sdk1_client(server)
    assert report["capability"] is None  # C3: client_demo.py would refuse to rely on keys here
    assert report["charges"] == 2 and all("result" in answer for answer in report["answers"]), report


@pytest.mark.anyio
async def test_a_strict_server_refuses_the_keyed_call_sent_by_the_sdk1_client_session():
    report = await sdk1_client("strict")
    assert report["capability"] is None and report["charges"] == 0
    assert [answer.get("code") for answer in report["answers"]] == [-32602, -32602], report
    assert all("idempotencyKey" in answer["message"] for answer in report["answers"])  # the key was on the wire


def typescript_client(server: str) -> dict:
    """The TypeScript SDK's 1.x Client (tests/interop/ts_compat_client.mjs), installed as run.sh installs it."""
    npm_installed(INTEROP)
    ran = subprocess.run(
        ["node", str(INTEROP / "ts_compat_client.mjs"), *SERVERS[server]()],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.parametrize("server", WITHOUT_THE_FEATURE)
def test_a_server_without_the_feature_drops_the_key_sent_by_the_typescript_client(server):
    report = typescript_client(server)
    assert report["capability"] is None
    assert report["charges"] == 2 and all("result" in answer for answer in report["answers"]), report


def test_a_strict_server_refuses_the_keyed_call_sent_by_the_typescript_client():
    report = typescript_client("strict")
    assert report["capability"] is None and report["charges"] == 0
    assert [answer.get("code") for answer in report["answers"]] == [-32602, -32602], report
