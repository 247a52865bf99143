"""The gateways between a client and the server (tests/gateway_runs.py), each installed from its registry at the
version tests/gateways/ pins: docs/gateways.md's table is what they do now, and behind the two that re-serialise a
call (fastmcp's proxy and mcp-proxy) the client half still deduplicates a retried call and never takes a rejection
they flattened into a tool result for the call's outcome (P33).

Slow: each gateway's environment is made from its pins on first use (about a minute each), then every route in
every placement starts a server and a gateway and waits on charges that take seconds.
"""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import gateway_table
import pytest
from gateway_runs import GATEWAYS, ROUTES, server_command
from kit_targets import with_table
from wire import sdk2_python

CHARGE_SECONDS = 3  # the server's charge: three of the client half's one-second attempts


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gateway_table_is_what_the_gateways_do():
    runs = gateway_table.measured_routes()
    # What docs/options.md says of gateways, read from the run itself: the _meta key and the marked argument reach
    # the server through every gateway measured; the field through none that re-serialises the call.
    for route, placed in runs.items():
        for placement in ("meta", "argument"):
            assert gateway_table.key_cell(placed[placement]).startswith("✔"), (route, placement)
    field = {route: gateway_table.key_cell(placed["params"])[0] for route, placed in runs.items()}
    assert field == {
        "direct": "✔",
        "fastmcp proxy": "✘",
        "mcp-proxy, HTTP front": "✘",
        "mcp-proxy, stdio front": "✘",
        "mcp-remote": "✔",
    }
    # The doc holds exactly this run's table (python3 tests/gateway_table.py --write brings it up to date).
    doc = gateway_table.DOC.read_text(encoding="utf-8")
    assert with_table(gateway_table.DOC, gateway_table.MARKS, gateway_table.table(runs)) == doc


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("route", ["fastmcp proxy", "mcp-proxy, HTTP front"])
def test_the_client_half_behind_a_gateway_deduplicates_a_retried_call_and_never_answers_with_in_progress(route):
    with tempfile.TemporaryDirectory(prefix="sep3182-gateway-") as folder:
        log = Path(folder) / "server.log"
        log.touch()
        server = server_command("meta", log, "--charge-delay", str(CHARGE_SECONDS))
        with ROUTES[route](server) as gateway:
            client = [sdk2_python(), str(GATEWAYS / "client_half.py"), f"http://127.0.0.1:{gateway.port}/mcp"]
            ran = subprocess.run(client, capture_output=True, text=True, timeout=120)
            ledger = gateway.ledger()
        said = log.read_text()
    assert ran.returncode == 0, ran.stderr[-3000:]
    outcome = json.loads(ran.stdout.splitlines()[-1])
    # The server's word first: one key claimed, and a retry that met it still running, so the gateway's flattened
    # "still running" result was there for the client to take.
    assert len(re.findall(r"claimed: key=", said)) == 1, said
    assert "in progress: key=" in said, f"no retry met the running charge, so nothing was tested:\n{said}"
    # The client's answer is the charge's, never that flattened rejection; it came back for the outcome, and the
    # charge happened once.
    assert outcome.get("isError") is False and outcome["text"].startswith("Charged 7"), outcome
    assert "replayed: key=" in said, f"the client never came back for the outcome:\n{said}"
    assert ledger["charges"] == 1
