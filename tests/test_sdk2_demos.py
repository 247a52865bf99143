"""The mcp 2.x demos end to end: the ledger demo over stdio and HTTP, the cluster demo, the
authorisation demo, the task demo and the confirm demo on SQLite and PostgreSQL; their scenarios
pass, and their verdicts fail against servers that break the SEP."""

import json
import subprocess

import pytest
from wire import ROOT, sdk2_python

pytestmark = pytest.mark.targets("2x-stdio", "2x-http")

CLIENT_DEMO = "mcp_idempotency_demo.ledger_demo"
CLUSTER_DEMO = "mcp_idempotency_demo.cluster_demo"
AUTH_DEMO = "mcp_idempotency_demo.auth_demo"
TASK_DEMO = "mcp_idempotency_demo.task_demo"
CONFIRM_DEMO = "mcp_idempotency_demo.confirm_demo"
IGNORES_THE_KEY = str(ROOT / "tests" / "stand_ins" / "ignores_the_key.py")  # advertises the capability, keeps nothing

# Stand-ins for the ledger server that break one SEP rule each, to show the demo's PASS is earned:
# each a subclass of the public layer, passed to the server's main.
STAND_IN = """
from mcp_idempotency_demo import ledger_server
from mcp_idempotency.layer import Idempotency
class StandIn(Idempotency):
{body}
ledger_server.main(StandIn)
"""
NO_DEDUPLICATION = """
    async def intercept_tool_call(self, params, ctx, call_next):  # the capability is still advertised, the key ignored
        return await call_next(ctx)
"""
DEDUPLICATION_WITHOUT_A_KEY = """
    answered = {}
    async def intercept_tool_call(self, params, ctx, call_next):  # charge_unguarded answered once per amount, unkeyed
        if ctx.params["name"] != "charge_unguarded":
            return await super().intercept_tool_call(params, ctx, call_next)
        if repr(ctx.params.get("arguments")) not in self.answered:
            self.answered[repr(ctx.params.get("arguments"))] = await call_next(ctx)
        return self.answered[repr(ctx.params.get("arguments"))]
"""
UNSCOPED_AND_UNCHECKED = """
    def _store_key(self, principal, key):  # K2 broken: the bare key, whoever sends it
        return key
ledger_server.TOOL_SCOPES.clear()  # K3 broken: any valid token may call any tool
"""
NO_CAPABILITY = """
    def _advertised(self, result):  # tools.idempotency left out of server/discover
        return result
"""
SHORT_KEYS = """
    pass
import sys
sys.argv += ["--max-key-length", "20"]  # keys of at most 20 characters, and the capability says so (P11')
"""


def play(demo: str, *options: str, server: str | None = None) -> subprocess.CompletedProcess:
    """Run a 2.x demo module with the 2.x interpreter, against the ledger server or a stand-in script."""
    command = [sdk2_python(), "-m", demo, *options, *(["--server", server] if server else [])]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)


def stand_in(tmp_path, body: str) -> str:
    """A stand-in server script: the ledger server with one method of its layer changed."""
    path = tmp_path / "stand_in.py"
    path.write_text(STAND_IN.format(body=body))
    return str(path)


def verdicts(output: str) -> list[str]:
    """The PASS/FAIL word of each scenario, in order."""
    return [line.split()[0] for line in output.splitlines() if line.strip().startswith(("PASS", "FAIL"))]


@pytest.fixture(scope="module")
def client_demo_run() -> subprocess.CompletedProcess:
    """One default run of sdk2/client_demo.py, shared by the tests that read it."""
    return play(CLIENT_DEMO)


def test_client_demo_plays_four_scenarios_over_stdio_and_http_and_each_passes(client_demo_run):
    assert client_demo_run.returncode == 0, client_demo_run.stdout + client_demo_run.stderr
    assert verdicts(client_demo_run.stdout) == ["PASS"] * 8
    assert "=== over stdio" in client_demo_run.stdout and "=== over http" in client_demo_run.stdout
    assert (
        "8 scenarios over stdio and http: without a key the retry charged twice, as it must; "
        "with SEP-3182, 6 of 6 behaved as it requires."
    ) in client_demo_run.stdout


def test_client_demo_finds_the_capability_through_server_discover(client_demo_run):
    """P14, C3: the SDK's auto mode negotiates 2026-07-28 by server/discover, and the client reads it."""
    settings = '{"maxKeyLength": 255, "retentionSeconds": 86400, "deadlineSeconds": 600, "leaseSeconds": 30}'  # P11'
    advertised = f"capabilities.tools.idempotency = {settings}"
    assert client_demo_run.stdout.count(f"server/discover → 2026-07-28, {advertised}") == 2


def test_client_demo_sends_the_key_beside_arguments(client_demo_run):
    frames = [
        json.loads(line.split("wire →", 1)[1]) for line in client_demo_run.stdout.splitlines() if "wire →" in line
    ]
    keyed = [frame["params"] for frame in frames if "idempotencyKey" in frame["params"]]
    assert keyed, "the demo printed no keyed frame"
    for params in keyed:
        assert set(params) == {"name", "arguments", "idempotencyKey", "_meta"}  # a sibling (W1)
        assert "idempotencyKey" not in params["arguments"] and "idempotencyKey" not in params["_meta"]


def test_client_demo_times_out_and_retries_in_the_sdk_own_way_on_each_transport(client_demo_run):
    """A real timeout: the 2.x client cancels over stdio and closes the request over HTTP."""
    stdio, http = client_demo_run.stdout.split("=== over http")
    assert "sends notifications/cancelled" in stdio and "closes the HTTP request" in http
    for transport in (stdio, http):
        slow_tool = transport.split("4. A tool slower")[1]
        assert "in progress" in slow_tool and "backing off" in slow_tool and "replayed:" in slow_tool


@pytest.mark.slow  # a demo played whole against a stand-in, 8 to 11 s: its verdicts, which test_demo.py checks on 1.x
def test_client_demo_fails_against_a_server_that_does_not_deduplicate(tmp_path):
    run = play(CLIENT_DEMO, "--transport", "stdio", server=stand_in(tmp_path, NO_DEDUPLICATION))
    assert run.returncode == 1
    # Scenario 1 needs no deduplication; the other three do, and their checks catch its absence.
    assert verdicts(run.stdout) == ["PASS", "FAIL", "FAIL", "FAIL"]


@pytest.mark.slow  # a demo played whole against a stand-in, 8 to 11 s: its verdicts, which test_demo.py checks on 1.x
def test_client_demo_scenario_1_fails_against_a_server_that_deduplicates_calls_without_a_key(tmp_path):
    """Scenario 1's PASS says the double charge happened: a server that spares it makes the verdict FAIL."""
    run = play(CLIENT_DEMO, "--transport", "stdio", server=stand_in(tmp_path, DEDUPLICATION_WITHOUT_A_KEY))
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["FAIL", "PASS", "PASS", "PASS"], run.stdout + run.stderr
    assert "without a key the retry did NOT charge twice; with SEP-3182, 3 of 3 behaved" in run.stdout


def test_client_demo_refuses_to_rely_on_keys_without_the_capability(tmp_path):
    run = play(CLIENT_DEMO, "--transport", "stdio", server=stand_in(tmp_path, NO_CAPABILITY))
    assert run.returncode == 1
    assert "capabilities.tools.idempotency = null" in run.stdout
    assert "refusing to rely on keys" in run.stdout
    assert verdicts(run.stdout) == []


def test_client_demo_refuses_to_rely_on_keys_when_the_server_takes_shorter_keys_than_its_uuids(tmp_path):
    """P11': maxKeyLength 20, while every key the demo mints has 36 characters: one line says so, nothing is sent."""
    run = play(CLIENT_DEMO, "--transport", "stdio", server=stand_in(tmp_path, SHORT_KEYS))
    assert run.returncode == 1
    assert '"maxKeyLength": 20' in run.stdout
    refusal = [line.strip() for line in run.stdout.splitlines() if "refusing to rely on keys" in line]
    assert refusal == ["client the server takes keys of at most 20 characters, ours have 36: refusing to rely on keys"]
    assert verdicts(run.stdout) == []


@pytest.mark.slow  # a demo played whole against a stand-in, 8 to 11 s: its verdicts, which test_demo.py checks on 1.x
def test_client_demo_takes_a_rejection_that_does_not_say_it_is_retryable_as_final():
    """Scenario 4 against tests/stand_ins/drops_retryable.py, whose in-progress rejection carries no data.retryable:
    the demos' loop (harness.call_until_answered) stops at once. Had it branched on data.type, it would back off
    and get the replay."""
    run = play(CLIENT_DEMO, "--transport", "stdio", server=str(ROOT / "tests" / "stand_ins" / "drops_retryable.py"))
    slow_tool = run.stdout.split("4. A tool slower")[1]
    assert "← idempotency_key_in_progress, not retryable: final" in slow_tool, run.stdout + run.stderr
    assert "backing off" not in slow_tool
    assert verdicts(run.stdout) == ["PASS", "PASS", "PASS", "FAIL"]
    assert run.returncode == 1


CLUSTER_HEADINGS = [
    "1. Each instance has a store of its own",
    "2. A shared store",
    "3. The same key with other",
    "4. A still running",
    "5. A killed (SIGKILL) right after",
    "6. A killed (SIGKILL) in the middle",
    "7. Every instance stopped",
    "8. Answers on SSE streams",
]


@pytest.mark.slow  # about 25 s each
def test_cluster_demo_plays_every_scenario_on_sqlite_and_each_passes():
    run = play(CLUSTER_DEMO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 8
    assert all(heading in run.stdout for heading in CLUSTER_HEADINGS)
    # Scenario 8's stream is a real one, and the SDK's client really closes it: the progress came on it,
    # and the unkeyed charge it carried was cancelled (P7's contrast), read from the ledger.
    closed_stream = run.stdout.split("8. Answers on SSE streams")[1]
    assert closed_stream.count("on the request's SSE response stream: progress 'charging'") == 2
    assert "the client closes the response stream, mid-charge\n  ledger 0 charge(s)" in closed_stream


@pytest.mark.slow  # about 25 s each
def test_cluster_demo_plays_every_scenario_on_postgresql_and_each_passes(postgres_url):
    run = play(CLUSTER_DEMO, "--store", postgres_url)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 8


@pytest.mark.slow  # about 25 s
def test_cluster_demo_fails_against_a_server_that_ignores_the_key():
    """Every shared-store scenario, the closed stream among them, needs the key kept; scenario 1 does not."""
    run = play(CLUSTER_DEMO, server=IGNORES_THE_KEY)
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["PASS"] + ["FAIL"] * 7, run.stdout + run.stderr


@pytest.mark.slow  # about 20 s each
def test_cluster_demo_fails_when_every_instance_keeps_its_own_store():
    """Run with a store per instance everywhere: what L2 forbids, and the demo's verdicts say so."""
    run = play(CLUSTER_DEMO, "--store", "memory")
    assert run.returncode == 1
    assert verdicts(run.stdout)[0] == "PASS" and verdicts(run.stdout).count("FAIL") >= 4


def test_auth_demo_plays_the_three_k_scenarios_on_sqlite_and_each_passes():
    run = play(AUTH_DEMO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 3
    assert 'http   ← A: 403 Bearer error="insufficient_scope", scope="ledger:charge"' in run.stdout


@pytest.mark.slow  # about 10 s each
def test_auth_demo_plays_the_three_k_scenarios_on_postgresql_and_each_passes(postgres_url):
    run = play(AUTH_DEMO, "--store", postgres_url)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 3


@pytest.mark.slow
def test_auth_demo_fails_against_a_server_that_neither_scopes_records_nor_checks_scopes(tmp_path):
    """Bob then gets Alice's recorded result, and her narrowed token reads it: the demo's K verdicts say so."""
    run = play(AUTH_DEMO, server=stand_in(tmp_path, UNSCOPED_AND_UNCHECKED))
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["PASS", "FAIL", "FAIL"], run.stdout + run.stderr


def test_task_demo_plays_a_lost_task_handle_without_and_with_a_key_on_sqlite_and_each_passes():
    run = play(TASK_DEMO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 2
    assert "one task, one charge" in run.stdout


@pytest.mark.slow  # about 10 s
def test_task_demo_plays_a_lost_task_handle_without_and_with_a_key_on_postgresql_and_each_passes(postgres_url):
    run = play(TASK_DEMO, "--store", postgres_url)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 2


@pytest.mark.slow  # a demo played whole against a stand-in, 8 to 11 s: its verdicts, which test_demo.py checks on 1.x
def test_task_demo_fails_against_a_server_that_does_not_deduplicate(tmp_path):
    """The key ignored: the retry gets a task of its own, and the second scenario's verdict says so."""
    run = play(TASK_DEMO, server=stand_in(tmp_path, NO_DEDUPLICATION))
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["PASS", "FAIL"]


@pytest.fixture(scope="module")
def confirm_demo_run() -> subprocess.CompletedProcess:
    """One default run of the confirm demo, shared by the tests that read it."""
    return play(CONFIRM_DEMO)


def test_confirm_demo_loses_the_charging_legs_answer_without_and_with_a_key_and_each_scenario_passes(
    confirm_demo_run,
):
    assert confirm_demo_run.returncode == 0, confirm_demo_run.stdout + confirm_demo_run.stderr
    assert verdicts(confirm_demo_run.stdout) == ["PASS"] * 3
    assert "without a key the lost answer cost a second charge, as it must" in confirm_demo_run.stdout
    assert "with the key on every leg (P25), 2 of 2 charged once." in confirm_demo_run.stdout


@pytest.mark.slow  # about 15 s
def test_confirm_demo_plays_the_lost_charging_leg_on_postgresql_and_each_scenario_passes(postgres_url):
    run = play(CONFIRM_DEMO, "--store", postgres_url)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 3


def test_confirm_demo_retries_the_very_continuation_whose_answer_was_lost_on_another_instance(confirm_demo_run):
    """What the client sends again, as printed off the wire: the key, the arguments, the answer if one was
    asked, and the state A sealed, verified on B, which answers with the replay."""
    scenarios = confirm_demo_run.stdout.split("\n2. ")[1].split("\n3. ")
    for scenario, answered in zip(scenarios, (True, False), strict=True):
        key = scenario.split("mints idempotencyKey ")[1].split()[0]
        sealed_by_a = scenario.split(", requestState ")[1].split("…")[0]
        retried = json.loads(scenario.split("wire →")[1].splitlines()[0])["params"]
        assert retried["idempotencyKey"] == key and retried["arguments"] == {"amount": 100}
        assert retried["requestState"].startswith(sealed_by_a)
        assert ("inputResponses" in retried) is answered
        assert "✂ the response to request" in scenario and f"replayed: key={key[:8]}…" in scenario


@pytest.mark.slow  # a demo played whole against a stand-in, 8 to 11 s: its verdicts, which test_demo.py checks on 1.x
def test_confirm_demo_fails_against_a_server_that_ignores_the_key():
    """The key ignored: the retried continuation charges again, and the keyed scenarios' verdicts say so."""
    run = play(CONFIRM_DEMO, server=IGNORES_THE_KEY)
    assert run.returncode == 1
    assert verdicts(run.stdout) == ["PASS", "FAIL", "FAIL"], run.stdout + run.stderr
