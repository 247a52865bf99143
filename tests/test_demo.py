"""client_demo.py end to end: its scenarios pass against server.py, and its verdicts can fail."""

import json
import subprocess
import sys

import pytest
from wire import ROOT

pytestmark = pytest.mark.targets("1x-stdio")

DEMO = ROOT / "client_demo.py"

# Stand-ins for server.py that break one SEP rule each, to show the demo's PASS is earned. Each
# loads server.py by its path: the SDK starts a server with a bare environment, so no PYTHONPATH
# would reach it.
STAND_IN = """
import importlib.util
spec = importlib.util.spec_from_file_location("server", {path!r})
server = importlib.util.module_from_spec(spec)
spec.loader.exec_module(server)
"""
NO_DEDUPLICATION = """
import mcp.types as types
server.server.request_handlers[types.CallToolRequest] = server.call_tool  # FastMCP's own handler, unguarded
server.main()
"""
DEDUPLICATION_WITHOUT_A_KEY = """
import mcp.types as types
answered = {}
async def by_arguments(request):  # charge_unguarded answered once per amount, though no key was sent
    if request.params.name != "charge_unguarded":
        return await server.idempotent_call_tool(request)
    if repr(request.params.arguments) not in answered:
        answered[repr(request.params.arguments)] = await server.idempotent_call_tool(request)
    return answered[repr(request.params.arguments)]
server.server.request_handlers[types.CallToolRequest] = by_arguments
server.main()
"""
NO_CAPABILITY = """
server.initialization_options = server.server.create_initialization_options  # tools.idempotency left out
server.main()
"""
SHORT_KEYS = """
server.MAX_KEY_LENGTH = 20  # keys of at most 20 characters, and the capability says so (P11')
server.main()
"""
NOTHING_RETRYABLE = """
server.RETRYABLE.clear()  # every rejection says retryable: false, in progress and store full too (P5' broken)
server.main()
"""


def play(*options: str, server: str | None = None) -> subprocess.CompletedProcess:
    """Run client_demo.py, against server.py or against a stand-in written from `server`."""
    command = [sys.executable, str(DEMO), *options]
    if server is not None:
        command = [
            sys.executable,
            "-c",
            f"import client_demo, pathlib; client_demo.SERVER = pathlib.Path({server!r}); client_demo.main()",
            *options,
        ]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def stand_in(tmp_path, source: str) -> str:
    """Write a stand-in server script beside nothing else; it loads server.py from the repo."""
    path = tmp_path / "stand_in.py"
    path.write_text(STAND_IN.format(path=str(ROOT / "server.py")) + source)
    return str(path)


def verdicts(output: str) -> list[str]:
    """The PASS/FAIL word of each scenario, in order."""
    return [line.split()[0] for line in output.splitlines() if line.strip().startswith(("PASS", "FAIL"))]


def scenario(output: str, number: int) -> list[str]:
    """The lines of one scenario of the walkthrough, from its heading to the next."""
    lines = output.split(f"\n{number}. ", 1)[1].split(f"\n{number + 1}. ", 1)[0].split("PASS")[0]
    return [line.strip() for line in lines.splitlines()]


# Each run is played once and read by every test that reads it: the runs are the slow part.


@pytest.fixture(scope="module")
def default_run() -> subprocess.CompletedProcess:
    """client_demo.py with no options, against server.py."""
    return play()


@pytest.fixture(scope="module")
def every_scenario() -> subprocess.CompletedProcess:
    """client_demo.py --all, against server.py."""
    return play("--all")


def test_default_run_plays_the_three_scenarios_and_each_passes(default_run):
    run = default_run
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 3
    # The baseline without a key is a failure shown, not a SEP requirement met: the tally says so.
    assert (
        "3 scenarios: without a key the retry charged twice, as it must; with SEP-3182, 2 of 2 behaved as it requires."
    ) in run.stdout


def test_all_adds_four_scenarios_and_each_passes(every_scenario):
    run = every_scenario
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 7
    for heading in (
        "4. A duplicate while the original is still running",
        "5. A tool slower than the client's timeout",
        "6. No key to charge_guarded",
        "7. A key reused after its retention window",
    ):
        assert heading in run.stdout
    assert "7 scenarios: without a key the retry charged twice, as it must; with SEP-3182, 6 of 6" in run.stdout


def test_walkthrough_prints_the_duplicate_after_the_original_claimed_the_key(every_scenario):
    """Scenario 4, in the order things happened: claim, duplicate sent, in progress, rejected, then recorded."""
    lines = scenario(every_scenario.stdout, 4)
    order = [
        next(index for index, line in enumerate(lines) if line.startswith(start))
        for start in (
            "server claimed:",
            "client sends the same call again",
            "server in progress:",
            "client ← error",
            "server recorded:",
            "server replayed:",
        )
    ]
    assert order == sorted(order), "\n".join(lines)


def test_slow_tool_is_retried_with_back_off_until_its_replay(every_scenario):
    """Scenario 5: time out, in progress and back off (at least once), then the replay; one charge."""
    lines = scenario(every_scenario.stdout, 5)
    decisions = [
        line.split(":")[0].removeprefix("server ")
        for line in lines
        if line.startswith("server ") and not line.startswith("server serving")
    ]
    assert decisions[0] == "claimed" and decisions[-1] == "replayed"
    assert "in progress" in decisions and decisions.count("claimed") == 1
    assert any("no response within" in line for line in lines) and any("backing off" in line for line in lines)


def test_a_rejection_the_server_does_not_mark_retryable_is_final_whatever_its_type(tmp_path):
    """Scenario 5 against a server whose in-progress rejection says retryable: false: the loop stops at once,
    and reports no answer. A loop that branched on data.type would back off and get the replay."""
    run = play("--all", server=stand_in(tmp_path, NOTHING_RETRYABLE))
    lines = scenario(run.stdout, 5)
    assert any(line.endswith("← idempotency_key_in_progress, not retryable: final") for line in lines), lines
    assert not any("backing off" in line for line in lines), lines
    assert verdicts(run.stdout) == ["PASS", "PASS", "PASS", "PASS", "FAIL", "PASS", "PASS"], run.stdout + run.stderr
    assert run.returncode == 1


def test_keyed_frame_is_printed_with_the_key_beside_arguments(default_run):
    frames = [json.loads(line.split("wire →", 1)[1]) for line in default_run.stdout.splitlines() if "wire →" in line]
    keyed = [frame["params"] for frame in frames if "idempotencyKey" in frame["params"]]
    assert keyed, "the demo printed no keyed frame"
    for params in keyed:
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
    assert "with SEP-3182, 0 of 2 behaved as it requires." in run.stdout


def test_scenario_1_fails_against_a_server_that_deduplicates_calls_without_a_key(tmp_path):
    """Scenario 1's PASS says the double charge happened: a server that spares it makes the verdict FAIL."""
    run = play(server=stand_in(tmp_path, DEDUPLICATION_WITHOUT_A_KEY))
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["FAIL", "PASS", "PASS"]
    assert "without a key the retry did NOT charge twice" in run.stdout


def test_demo_refuses_to_rely_on_keys_when_the_capability_is_absent(tmp_path):
    run = play(server=stand_in(tmp_path, NO_CAPABILITY))
    assert run.returncode == 1
    assert "capabilities.tools.idempotency = null" in run.stdout
    assert "refusing to rely on keys" in run.stdout
    assert verdicts(run.stdout) == []


def test_demo_refuses_to_rely_on_keys_when_the_server_takes_shorter_keys_than_its_uuids(tmp_path):
    """P11': maxKeyLength 20, while every key the demo mints has 36 characters: one line says so, nothing is sent."""
    run = play(server=stand_in(tmp_path, SHORT_KEYS))
    assert run.returncode == 1
    assert '"maxKeyLength": 20' in run.stdout
    refusal = [line.strip() for line in run.stdout.splitlines() if "refusing to rely on keys" in line]
    assert refusal == ["client the server takes keys of at most 20 characters, ours have 36: refusing to rely on keys"]
    assert verdicts(run.stdout) == []


def test_a_lost_response_is_really_lost_after_the_server_sent_it(default_run):
    """The link drops the response on the client's side: the server's log shows it executed and answered."""
    output = default_run.stdout
    scenario_2 = output.split("2. With an idempotencyKey")[1].split("3. ")[0]
    executed, lost, replayed = (scenario_2.index(marker) for marker in ("server claimed:", "✂", "server replayed:"))
    assert executed < lost < replayed
