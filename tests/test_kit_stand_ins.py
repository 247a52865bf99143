"""Each stand-in (tests/stand_ins/), run on its own rule's checks only, falls short on exactly those; each
check the kit's gaps left open (issue 25) says what it could not test; every MUST check has a stand-in.

Quick: one server per variant a stand-in's checks need, and only those checks; the full runs, every
check against every stand-in, are test_kit.py's slow tests."""

import json
import subprocess
import sys

import kit_targets
import pytest
from kit_targets import kit
from wire import ROOT, sdk2_python

KIT = ROOT / "conformance" / "kit.py"
MUST_CHECKS = {check.id.removeprefix("sep-3182-") for check in kit.CHECKS if check.severity == "MUST"}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", list(kit_targets.STAND_INS))
def test_stand_in_falls_short_on_exactly_its_rules_checks(name):
    expected = kit_targets.STAND_INS[name][1]
    # 12 s: four times the slowest variant's charge (3 s), yet far below the 30 s a key that never settles costs
    results, output = kit_targets.run_kit(name, [f"sep-3182-{check}" for check in sorted(expected)], timeout=12)
    assert kit_targets.short_of(results) == expected, output


def test_every_must_check_has_a_stand_in_that_breaks_it():
    broken = set().union(*(checks for _, checks in kit_targets.STAND_INS.values()))
    assert MUST_CHECKS - broken == set()


@pytest.mark.timeout(180)
def test_issue_25_checks_pass_on_the_2x_server_and_retryable_spoils_no_shape_check():
    """The other half of each issue-25 stand-in: the same checks pass where the rule is kept. And the checks
    of error.data's shape (P5) take data.retryable beside type and key: no WARNING, nothing unshaped."""
    checks = [
        *kit_targets.ISSUE_25_CHECKS,
        "sep-3182-conflict-error-data",
        "sep-3182-in-progress-error-data",
        "sep-3182-store-bound",
        "sep-3182-different-requests-conflict",
    ]
    results, output = kit_targets.run_kit("2x-stdio", checks)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(checks, "SUCCESS"), output
    assert all(not entry["details"].get("unshaped") for entry in results), output


def run(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(KIT), *options, "--timeout", "20"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def ledger(tmp_path, *server_options: str) -> str:
    return subprocess.list2cmdline(
        [
            sdk2_python(),
            "-m",
            "mcp_idempotency.demo.ledger_server",
            "--store",
            f"sqlite:{tmp_path / 'store.db'}",
            *server_options,
        ]
    )


def test_without_another_tool_the_tool_name_row_is_not_tested_and_the_summary_says_so(tmp_path):
    """E1's other half (another tool, same arguments) cannot run: the check is SKIPPED, never SUCCESS."""
    ran = run(
        "--command",
        ledger(tmp_path),
        "--other-tool",
        "no_such_tool",
        "--check",
        "sep-3182-different-requests-conflict",
        "--json",
        str(tmp_path / "checks.json"),
    )
    (entry,) = json.loads((tmp_path / "checks.json").read_text())
    assert entry["status"] == "SKIPPED" and entry["errorMessage"].startswith("NOT TESTED: another tool's name"), (
        ran.stdout
    )
    assert ran.stdout.splitlines()[-1] == (
        "sep-3182: 0 passed, 0 failed, 0 warnings, 1 skipped; another tool's name "
        "under one key (E1) NOT tested (give --other-tool, a second tool taking "
        "the charge tool's arguments)"
    )


def test_a_server_without_the_fixture_tools_is_one_failure_of_the_contract_not_one_per_check(tmp_path):
    ran = run("--command", ledger(tmp_path), "--count-tool", "no_such_count", "--json", str(tmp_path / "checks.json"))
    report = json.loads((tmp_path / "checks.json").read_text())
    failures = [entry for entry in report if entry["status"] == "FAILURE"]
    assert ran.returncode == 1
    assert [entry["id"] for entry in failures] == ["sep-3182-fixture-contract"], ran.stdout
    assert "lists no tool no_such_count" in failures[0]["errorMessage"]
    assert {entry["status"] for entry in report if entry is not failures[0]} == {"SKIPPED"}
    assert ran.stdout.count("FAILURE") == 1, ran.stdout


def test_retryable_check_says_which_rejections_it_could_not_provoke_without_the_slow_and_bounded_servers(tmp_path):
    """Conflict and invalid key are tested on the plain server; in progress and store full need their own."""
    ran = run(
        "--command",
        ledger(tmp_path),
        "--check",
        "sep-3182-rejection-retryable",
        "--json",
        str(tmp_path / "checks.json"),
    )
    (entry,) = json.loads((tmp_path / "checks.json").read_text())
    assert entry["status"] == "SKIPPED", ran.stdout
    assert (
        "data.retryable of idempotency_key_in_progress and data.retryable of idempotency_store_full NOT tested"
        in ran.stdout.splitlines()[-1]
    )
