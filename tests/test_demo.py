"""client_demo.py end to end: its scenarios pass against server.py, and its verdicts can fail."""

import json
import subprocess
import sys

from wire import ROOT

DEMO = ROOT / "client_demo.py"

# Stand-ins for server.py that break one SEP rule each, to show the demo's PASS is earned.
NO_DEDUPLICATION = """
import mcp.types as types, server
server.server.request_handlers[types.CallToolRequest] = server.call_tool  # FastMCP's own handler, unguarded
server.main()
"""
NO_CAPABILITY = """
import server
server.initialization_options = server.server.create_initialization_options  # tools.idempotency left out
server.main()
"""


def play(*options: str, server: str | None = None) -> subprocess.CompletedProcess:
    """Run client_demo.py, against server.py or against a stand-in written from `server`."""
    command = [sys.executable, str(DEMO), *options]
    if server is not None:
        command = [sys.executable, "-c",
                   f"import client_demo, pathlib; client_demo.SERVER = pathlib.Path({server!r}); client_demo.main()",
                   *options]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def stand_in(tmp_path, source: str) -> str:
    """Write a stand-in server script beside nothing else; it imports server.py from the repo."""
    path = tmp_path / "stand_in.py"
    path.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + source)
    return str(path)


def verdicts(output: str) -> list[str]:
    """The PASS/FAIL word of each scenario, in order."""
    return [line.split()[0] for line in output.splitlines() if line.strip().startswith(("PASS", "FAIL"))]


def test_default_run_plays_the_three_scenarios_and_each_passes():
    run = play()
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 3
    assert "3 of 3 scenarios behaved as SEP-3182 requires." in run.stdout


def test_all_adds_in_flight_no_key_and_expiry_scenarios_and_each_passes():
    run = play("--all")
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 6
    for heading in ("4. A duplicate while the original is still running", "5. No key to charge_guarded",
                    "6. A key reused after its retention window"):
        assert heading in run.stdout


def test_keyed_frame_is_printed_with_the_key_beside_arguments():
    frames = [json.loads(line.split("wire →", 1)[1]) for line in play().stdout.splitlines() if "wire →" in line]
    assert frames, "the demo printed no keyed frame"
    for frame in frames:
        params = frame["params"]
        assert set(params) == {"name", "arguments", "idempotencyKey"}  # a sibling, not inside arguments (W1)
        assert "idempotencyKey" not in params["arguments"]


def test_wire_option_prints_every_frame_in_both_directions():
    output = play("--wire").stdout
    assert '"method":"initialize"' in output and '"method":"notifications/initialized"' in output
    assert output.count("wire ←") >= 10  # every response, including the unkeyed ones


def test_demo_fails_against_a_server_that_does_not_deduplicate(tmp_path):
    run = play(server=stand_in(tmp_path, NO_DEDUPLICATION))
    assert run.returncode == 1
    # Scenario 1 needs no deduplication; 2 and 3 do, and their checks catch its absence.
    assert verdicts(run.stdout) == ["PASS", "FAIL", "FAIL"]


def test_demo_refuses_to_rely_on_keys_when_the_capability_is_absent(tmp_path):
    run = play(server=stand_in(tmp_path, NO_CAPABILITY))
    assert run.returncode == 1
    assert "capabilities.tools.idempotency = null" in run.stdout
    assert "refusing to rely on keys" in run.stdout
    assert verdicts(run.stdout) == []


def test_a_lost_response_is_really_lost_after_the_server_sent_it():
    """The link drops the response on the client's side: the server's log shows it executed and answered."""
    output = play().stdout
    scenario_2 = output.split("2. With an idempotencyKey")[1].split("3. ")[0]
    executed, lost, replayed = (scenario_2.index(marker) for marker in ("server claimed:", "✂", "server replayed:"))
    assert executed < lost < replayed
