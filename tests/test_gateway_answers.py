"""The client half learns from the answer, not from a handshake a gateway may have rewritten (P33).

- Behind a re-serialising gateway (tests/lossy_proxy.py in `flatten` mode, as fastmcp's proxy and mcp-proxy
  were measured to behave: no capability, each rejection an isError text result) a keyed call sent without
  the capability still deduplicates: "still running" is never taken as the call's outcome, but waited out and
  sent again, and a conflict is still KeyRefused.
- honoured(result) reads the acknowledgement the 2.x ledger server puts in a keyed result's _meta, on the first
  answer and the replay, a tool's own error included; an isError result that carries it is the tool's own,
  returned as it came, even when its text quotes a rejection's message, and one without it is read as the
  rejection it quotes (tests/acknowledging_server.py makes the answers no honest server gives)."""

import json
import subprocess
import sys

import pytest
from wire import ROOT, HttpWire, free_port, sdk2_python

BEHIND_A_GATEWAY = """
import json, sys
import anyio
from mcp import Client
from mcp_idempotency.client import KeyRefused, Policy, call_tool, discover_settings, new_key

async def main(url):
    async with Client(url) as client:
        settings = await discover_settings(client)
        key, quick = new_key(), Policy(timeout=1, first_back_off=0.2, max_back_off=0.4)
        result = await call_tool(client, "charge_guarded", {"amount": 7}, key=key, settings=settings, policy=quick)
        try:
            await call_tool(client, "charge_guarded", {"amount": 8}, key=key, settings=settings, policy=quick)
            conflict = None
        except KeyRefused as refused:
            conflict = refused.error.data["type"]
        print(json.dumps({"settings": settings, "text": result.content[0].text, "error": result.is_error,
                          "conflict": conflict}), flush=True)

anyio.run(main, sys.argv[1])
"""


@pytest.mark.targets("2x-http")
def test_behind_a_gateway_that_flattens_rejections_a_keyed_call_waits_out_still_running_and_charges_once(tmp_path):
    port = free_port()
    command = [sdk2_python(), "-m", "mcp_idempotency_demo.ledger_server", "--verbose", "--transport", "http"]
    command += ["--port", str(port), "--placement", "meta", "--charge-delay", "3"]
    server = HttpWire("2x-http", [*command, "--store", f"sqlite:{tmp_path / 'store.db'}"], port)
    gateway = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "lossy_proxy.py"), str(port), "flatten", "charge_guarded"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{gateway.stdout.readline().split()[-1]}/mcp"
        run = subprocess.run([sdk2_python(), "-c", BEHIND_A_GATEWAY, url], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads(run.stdout.splitlines()[-1])
        gateway.terminate()
        flattened = gateway.communicate(timeout=10)[0].splitlines()
        assert report["settings"] is None  # the gateway hid the capability; the key went in _meta all the same
        assert report["text"] == "Charged 7. New balance: 7" and report["error"] is False
        assert report["conflict"] == "idempotency_key_conflict"
        assert "flattened idempotency_key_in_progress" in flattened  # "still running" came as a result, and was retried
        assert flattened[-1] == "flattened idempotency_key_conflict"
        assert server.ledger() == {"balance": 7, "charges": 1}
    finally:
        gateway.kill()
        server.close()


HONOURED = """
import json, os, sys
import anyio
from mcp import Client, StdioServerParameters
from mcp_idempotency.client import call_tool, discover_settings, honoured, new_key

async def main(command):
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        settings = await discover_settings(client)
        report = {}
        for name, amount in (("charge", 7), ("refused", 0)):
            key = new_key()
            answers = [await call_tool(client, "charge_guarded", {"amount": amount}, key=key, settings=settings)
                       for _ in range(2)]
            report[name] = [[honoured(a), a.is_error, a.content[0].text, a.meta] for a in answers]
        report["ledger"] = json.loads((await client.call_tool("get_balance", {})).content[0].text)
        print(json.dumps(report), flush=True)
        os._exit(0)  # the verdict is out; the SDK's orderly stdio shutdown takes seconds more

anyio.run(main, sys.argv[1:])
"""


@pytest.mark.targets("2x-stdio")
def test_honoured_reads_the_ledger_servers_acknowledgement_on_the_first_answer_and_the_replay(tmp_path):
    """The acknowledgement as the real server sends it: a charge and a tool's own error (an amount the tool
    refuses), each honoured on its first answer and its replay, which carries the same _meta; one charge."""
    server = [sdk2_python(), "-m", "mcp_idempotency_demo.ledger_server", "--placement", "meta"]
    server += ["--store", f"sqlite:{tmp_path / 'store.db'}"]
    run = subprocess.run([sdk2_python(), "-c", HONOURED, *server], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    for name, error in (("charge", False), ("refused", True)):
        first, replay = report[name]
        assert first[:2] == [True, error] and replay == first, report
    assert report["ledger"]["charges"] == 1, report


ACKNOWLEDGEMENTS = """
import json, os, sys
import anyio
from mcp import Client, StdioServerParameters
from mcp_idempotency.client import GaveUp, call_tool, discover_settings, honoured, new_key

async def main(command):
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        settings = await discover_settings(client)
        report = {"settings": [settings.placement.value, settings.deadline_seconds, settings.lease_seconds]}
        for tool in ("plain", "own_error"):
            key = new_key()
            result = await call_tool(client, tool, {"key": key}, key=key, settings=settings)
            report[tool] = {"honoured": honoured(result), "error": result.is_error, "text": result.content[0].text}
        try:  # the default policy: it sends the key again for as long as the server says it may be in progress
            await call_tool(client, "unacknowledged_error", {"key": "k"}, key="k", settings=settings)
        except GaveUp as gave_up:
            report["unacknowledged_error"] = [type(gave_up).__name__, gave_up.last.data["type"]]
        report["runs"] = json.loads((await client.call_tool("count", {})).content[0].text)
        print(json.dumps(report), flush=True)
        os._exit(0)  # the verdict is out; the SDK's orderly stdio shutdown takes seconds more

anyio.run(main, sys.argv[1:])
"""


@pytest.mark.targets("2x-stdio")
def test_honoured_reads_the_acknowledgement_and_an_unacknowledged_rejection_is_retried_while_it_may_run():
    server = [sdk2_python(), str(ROOT / "tests" / "acknowledging_server.py")]
    run = subprocess.run([sdk2_python(), "-c", ACKNOWLEDGEMENTS, *server], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["plain"] == {"honoured": False, "error": False, "text": "plain ran"}
    quoted = "the tool says: a request with this idempotencyKey is still running; retry shortly"
    assert report["own_error"] == {"honoured": True, "error": True, "text": quoted}  # the tool's answer, as it came
    # Read as the rejection and sent again, until the advertised deadline and lease (2 s) had passed: the
    # default policy would otherwise send it for the library's default 630 s, past this run's timeout.
    assert report["unacknowledged_error"] == ["GaveUp", "idempotency_key_in_progress"]
    assert report["settings"] == ["meta", 1, 1]
    runs = report.pop("runs")
    assert runs["unacknowledged_error"] > 1 and {"plain": 1, "own_error": 1}.items() <= runs.items()
