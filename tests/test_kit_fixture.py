"""The kit's fixture, against tests/account_server.py, whose every tool needs an account: --tool-arguments makes
its charge tool the kit's; a fixture that does not work is exit 2, named, and no rule failed; over HTTP the kit
waits for a server that is still starting."""

import json
import subprocess
import sys
import time

import pytest
from kit_targets import kit
from wire import ROOT, free_port, sdk2_python

KIT = ROOT / "conformance" / "kit.py"
ACCOUNTS = ["--charge-tool", "charge", "--count-tool", "charges"]
# "amount": 0 is refused by the charge tool: the run passes only if the kit's own amount wins the clash.
ACME = ["--tool-arguments", '{"account": "acme", "amount": 0}']
# One check per way the kit calls a tool: a call it builds, arguments it spells as text, params it sends as
# they are, and no key at all (the five that failed as MUST rules before the kit took fixed arguments).
CHECKS = [
    "sep-3182-repeat-executes-once",
    "sep-3182-conflict-rejected",
    "sep-3182-equivalence-serialisation",
    "sep-3182-key-only-in-params",
    "sep-3182-no-key-runs-every-time",
]


def account_server(*options: str) -> list[str]:
    return [sdk2_python(), str(ROOT / "tests" / "account_server.py"), *options]


def kit_command(server: list[str], *options: str, checks: list[str] = CHECKS) -> list[str]:
    """The kit against the account server started over stdio, on `checks`."""
    chosen = [option for check in checks for option in ("--check", check)]
    return [sys.executable, str(KIT), "--command", subprocess.list2cmdline(server), *options, *chosen]


def run(command: list[str], tmp_path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run the kit; its exit, output and checks.json."""
    report = tmp_path / "checks.json"
    ran = subprocess.run([*command, "--json", str(report)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return ran, json.loads(report.read_text()) if report.exists() else []


def test_a_charge_tool_that_needs_an_account_passes_with_tool_arguments(tmp_path):
    ran, report = run(kit_command(account_server(), *ACCOUNTS, *ACME), tmp_path)
    assert {entry["id"]: entry["status"] for entry in report} == dict.fromkeys(CHECKS, "SUCCESS"), ran.stdout
    assert ran.returncode == 0, ran.stdout


def assert_fixture_broken(ran: subprocess.CompletedProcess, report: list[dict], says: str) -> None:
    """Exit 2, one FAILURE (the fixture's) saying `says`, no rule failed, every check SKIPPED."""
    assert ran.returncode == kit.WRONG_SETUP == 2, ran.stdout
    (failure,) = [entry for entry in report if entry["status"] == "FAILURE"]
    assert failure["id"] == "sep-3182-fixture-contract" and failure["details"]["severity"] == "FIXTURE"
    assert says in failure["errorMessage"], failure["errorMessage"]
    assert {entry["status"] for entry in report if entry is not failure} == {"SKIPPED"}, ran.stdout
    assert ", 0 failed, " in ran.stdout.splitlines()[-1], ran.stdout


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param(
            ACCOUNTS,
            "the count tool charges gave no count charges: it answered",
            id="without_tool_arguments_the_count_tool_lacks_its_account",
        ),
        pytest.param(
            ["--charge-tool", "charge", "--count-tool", "get_balance"],
            "the server lists no tool get_balance",
            id="a_count_tool_the_server_lacks",
        ),
        pytest.param(
            ["--charge-tool", "charge_offline", "--count-tool", "charges", *ACME],
            'the charge tool charge_offline did not succeed with the arguments {"account": "acme", "amount": 100}: '
            'it answered {"content": [{"text": "Error executing tool charge_offline"',
            id="a_charge_tool_that_always_errors",
        ),
        pytest.param(
            [*ACCOUNTS, "--count-field", "refunds", *ACME],
            "the count did not move by one: charges's refunds was 0, then 0 after a charge charge that succeeded",
            id="a_count_that_never_moves",
        ),
    ],
)
def test_a_fixture_that_does_not_work_exits_2_naming_it_and_fails_no_rule(options, says, tmp_path):
    ran, report = run(kit_command(account_server(), *options), tmp_path)
    assert_fixture_broken(ran, report, says)


def test_tool_arguments_that_are_no_json_object_are_a_wrong_command_line(tmp_path):
    for bad, says in [("{account: acme}", "not JSON"), ('["acme"]', "not a JSON object")]:
        ran, report = run(kit_command(account_server(), *ACCOUNTS, "--tool-arguments", bad), tmp_path)
        assert ran.returncode == 2 and report == [], ran.stderr
        assert f"argument --tool-arguments: {says}" in ran.stderr, ran.stderr


def http_kit(port: int, *options: str) -> list[str]:
    chosen = [option for check in CHECKS[:1] for option in ("--check", check)]
    return [sys.executable, str(KIT), "--url", f"http://127.0.0.1:{port}/mcp", *options, *chosen]


def test_over_http_the_kit_waits_for_a_server_started_after_it(tmp_path):
    """The kit is launched first; the server starts listening seconds later, and the run still passes."""
    port, report = free_port(), tmp_path / "checks.json"
    waiting = subprocess.Popen(
        [*http_kit(port, *ACCOUNTS, *ACME, "--timeout", "30"), "--json", str(report)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    time.sleep(2)  # the kit is already trying to connect
    server = subprocess.Popen(account_server("--transport", "http", "--port", str(port)), stderr=subprocess.DEVNULL)
    try:
        output, _ = waiting.communicate(timeout=90)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert waiting.returncode == 0, output
    assert [entry["status"] for entry in json.loads(report.read_text())] == ["SUCCESS"], output


def test_over_http_a_server_that_never_listens_is_named_after_the_timeout(tmp_path):
    port = free_port()
    started = time.monotonic()
    ran, report = run(http_kit(port, *ACCOUNTS, "--timeout", "2"), tmp_path)
    assert_fixture_broken(
        ran, report, f"nothing accepted a connection at http://127.0.0.1:{port}/mcp in 2 s (--timeout)"
    )
    assert 2 <= time.monotonic() - started < 30
