"""Each stand-in (tests/stand_ins/), run on its own rule's checks only, falls short on exactly those, each on the
assertion its row names; each check the kit's gaps left open (issue 25) says what it could not test; every MUST check
has a stand-in.

Quick: one server per variant a stand-in's checks need, and only those checks (a check with rows that a server of its
own serves, only on its rows' stand-ins); the full runs, every check against every stand-in, are test_kit.py's slow
tests."""

import json
import subprocess
import sys
from collections import Counter

import kit_targets
import pytest
from kit_targets import kit
from wire import ROOT, sdk2_python

KIT = ROOT / "conformance" / "kit.py"
BOOKING = kit_targets.EXAMPLES / "booking.py"
MUST_CHECKS = {check.id.removeprefix("sep-3182-") for check in kit.CHECKS if check.severity == "MUST"}

# (check, assertion, stand-in): each assertion of a MUST check that makes several, named by a fragment of the
# failure it reports, and a stand-in that breaks that one and no other of the check's. A check weakened on any one
# of its assertions then passes that row's stand-in, and the stand-in's run below fails. Not here yet: the later
# assertions of the authorisation checks (K1-K3) and of task-handle-replayed, which need stand-ins over HTTP with
# tokens or tasks; large-integers-exact's refusal branch (no stand-in of the layer refuses a large integer); and
# no-key-runs-every-time's absent key.
ASSERTIONS = [
    ("capability-declared", "is absent", "drops-the-capability"),
    ("capability-declared", "not an object", "advertises-no-object"),
    ("capability-settings", "not positive integers", "advertises-a-fractional-window"),
    ("capability-settings", "characters was not accepted", "advertises-a-longer-key-than-it-takes"),
    ("capability-settings", "characters was not refused as", "advertises-a-shorter-key-than-it-takes"),
    ("capability-settings", "characters was refused, but ran", "runs-the-invalid-keys-it-refuses"),
    ("capability-settings", "advertises no retentionSeconds (SHOULD)", "advertises-no-window"),
    ("repeat-executes-once", "times for one key", "ignores-the-key"),
    ("repeat-executes-once", "the retry's answer differs", "marks-its-replays"),
    ("replay-not-refreshed", "the retry ran the tool again", "ignores-the-key"),
    ("replay-not-refreshed", "the replay differs from the original", "marks-its-replays"),
    ("error-outcome-recorded", "the error was not replayed", "marks-its-replays"),
    ("error-outcome-recorded", "corrected arguments ran the tool", "runs-the-conflicts-it-refuses"),
    ("error-outcome-recorded", "corrected arguments was not rejected", "answers-a-conflict-as-a-tool-error"),
    ("conflict-leaves-the-record", "the original's retry ran the tool again", "ignores-the-key"),
    ("conflict-leaves-the-record", "no longer replays after a conflict", "records-its-own-rejections"),
    ("conflict-rejected", "the changed request ran the tool", "runs-the-conflicts-it-refuses"),
    ("conflict-rejected", "the cached result came back", "replays-a-conflict"),
    ("conflict-rejected", "the changed request was not rejected", "answers-a-conflict-as-a-tool-error"),
    *[
        row
        for check in ("serialisation", "numbers", "strings", "meta-ignored")
        for row in [
            (f"equivalence-{check}", "the retry ran the tool", "ignores-the-key"),
            (f"equivalence-{check}", "not replayed", "marks-its-replays"),
        ]
    ],
    ("odd-keys-are-keys", "ran 0 times", "refuses-keys-that-are-not-plain-ascii"),
    ("odd-keys-are-keys", "was not replayed", "marks-its-replays"),
    ("different-requests-conflict", "the retry ran the tool", "runs-the-conflicts-it-refuses"),
    ("different-requests-conflict", "another tool: not rejected", "ignores-the-tool-name"),
    ("large-integers-exact", "were one request", "compares-integers-as-doubles"),
    ("large-integers-exact", "ran the tool under the first's key", "runs-the-conflicts-it-refuses"),
    ("large-integers-exact", "is no conflict", "answers-a-conflict-as-a-tool-error"),
    ("conflict-while-running", "the changed request ran (2 charges)", "runs-the-conflicts-it-refuses"),
    ("conflict-while-running", "the changed request ran (1 charges)", "answers-a-conflict-as-a-tool-error"),
    ("conflict-while-running", "rejected, but not as a conflict", "replays-a-conflict"),
    ("retention-window", "did not replay inside its window", "ends-its-window-a-second-early"),
    ("retention-window", "still replayed", "never-forgets-a-key"),
    *[
        ("rejection-retryable", f"{kind}: data.retryable is 'absent'", f"drops-retryable-of-{name}")
        for name, kind in [
            ("conflict", "idempotency_key_conflict"),
            ("invalid-key", "invalid_idempotency_key"),
            ("in-progress", "idempotency_key_in_progress"),
            ("store-full", "idempotency_store_full"),
        ]
    ],
    ("live-run-never-taken-over", "were not a conflict", "replays-a-conflict"),
    ("live-run-never-taken-over", "it took over or waited", "never-renews-its-lease"),
    ("live-run-never-taken-over", "a result unlike the original's", "marks-its-replays"),
    ("live-run-never-taken-over", "retried past its lease, charged 2 times", "runs-the-conflicts-it-refuses"),
    ("in-progress-ends-by-the-deadline", "was refused as in progress", "never-ends-a-hung-run"),
    ("in-progress-ends-by-the-deadline", "was not recorded as a -32603 outcome", "gives-back-a-hung-runs-key"),
    ("result-acknowledged", "the first answer's acknowledgement is", "drops-the-acknowledgement"),
    ("result-acknowledged", "the replay's acknowledgement is", "drops-the-acknowledgement-from-replays"),
]


ON_THE_MAIN_SERVER = {
    check.id.removeprefix("sep-3182-") for check in kit.CHECKS if (check.needs, check.uses) == ("main", ())
}


def quick_checks(name: str) -> set[str]:
    """The checks a stand-in runs in the quick set: every one it breaks, but a check with rows that needs a server of
    its own (a slow charge, a short window or lease), which costs seconds: only its rows' stand-ins run that one."""
    rows = {check for check, _, stand_in in ASSERTIONS if stand_in == name}
    witnessed = {check for check, _, _ in ASSERTIONS}
    return {
        check
        for check in kit_targets.STAND_INS[name][1]
        if check in ON_THE_MAIN_SERVER or check in rows or check not in witnessed
    }


# All but drops-retryable, whose one check the rows of its per-kind switches witness: the slow set runs it.
QUICK_STAND_INS = [name for name in kit_targets.STAND_INS if quick_checks(name)]


def waits_on_a_running_charge(name: str) -> bool:
    """Does one of a stand-in's checks wait on a charge kept running (a slow charge, a lease or deadline outlived)?"""
    checks = {check.id.removeprefix("sep-3182-"): check for check in kit.CHECKS}
    waiting = {"slow", "short_lease", "short_deadline"}
    return any({checks[check].needs, *checks[check].uses} & waiting for check in quick_checks(name))


# A stand-in whose checks wait on a running charge takes 4 to 15 s (together 2 min of this test's 2 min 37 s, summed
# over both workers): the slow set runs it, beside the whole kit against every stand-in (test_kit.py).
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=[pytest.mark.slow] * waits_on_a_running_charge(name)) for name in QUICK_STAND_INS]
)
def test_stand_in_falls_short_on_exactly_its_rules_checks(name):
    expected = quick_checks(name)
    # 12 s: four times the slowest variant's charge (3 s), yet far below the 30 s a key that never settles costs
    checks = [f"sep-3182-{check}" for check in sorted(expected)]
    results, output = kit_targets.run_kit(name, checks, timeout=12, memory=True)
    assert kit_targets.short_of(results) == expected, output
    said = {entry["id"].removeprefix("sep-3182-"): entry.get("errorMessage", "") for entry in results}
    for check, assertion, _ in [row for row in ASSERTIONS if row[2] == name]:
        assert assertion in said[check], f"{check} fell short, but not on {assertion!r}: {said[check]}"


def test_each_assertion_row_is_one_of_a_must_check_that_its_stand_in_fails():
    """A row's check is a MUST check its stand-in is expected to fail (so the run above reads its message), and no
    assertion of a check has two rows."""
    assert {check for check, _, _ in ASSERTIONS} <= MUST_CHECKS
    assert all(check in kit_targets.STAND_INS[name][1] for check, _, name in ASSERTIONS)
    assert Counter((check, assertion) for check, assertion, _ in ASSERTIONS).most_common(1)[0][1] == 1


def test_every_must_check_has_a_stand_in_that_breaks_it():
    broken = set().union(*(checks for _, checks in kit_targets.STAND_INS.values()))
    assert MUST_CHECKS - broken == set()


def test_every_must_check_has_a_stand_in_of_a_narrower_rule_than_ignoring_the_key():
    """Even those that compare a retry with its original (S0, S2) and a string's escapes (E4): marks-its-replays."""
    narrower = [checks for name, (_, checks) in kit_targets.STAND_INS.items() if name != "ignores-the-key"]
    assert MUST_CHECKS - set().union(*narrower) == set()


@pytest.mark.timeout(180)
def test_issue_25_checks_pass_on_the_2x_server_and_retryable_spoils_no_shape_check():
    """The other half of each issue-25 stand-in: the same checks pass where the rule is kept. And the checks
    of error.data's shape (P5) take data.retryable beside type and key: no WARNING, nothing unshaped."""
    # The live run's check is held on every server by test_kit.py's own test of it: not run twice here.
    checks = [
        *(check for check in kit_targets.ISSUE_25_CHECKS if check != "sep-3182-live-run-never-taken-over"),
        "sep-3182-conflict-error-data",
        "sep-3182-in-progress-error-data",
        "sep-3182-store-bound",
        "sep-3182-different-requests-conflict",
    ]
    results, output = kit_targets.run_kit("2x-stdio", checks)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(checks, "SUCCESS"), output
    assert all(not entry["details"].get("unshaped") for entry in results), output


# Issue 24: a lost task handle (P24) and an input-required answer (P25), each with its stand-in above.
TASK_CHECK, INPUT_REQUIRED_CHECK = "sep-3182-task-handle-replayed", "sep-3182-input-required-never-replayed"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["2x-stdio-tasks", "2x-http-tasks"])
def test_task_and_input_required_checks_pass_on_the_2x_server_that_offers_both(name):
    """The other half of makes-a-task-per-call and keeps-the-question: the ledger server with --tasks, its
    charge_confirmed named, passes both (over HTTP, tasks/get carries the task id in Mcp-Name)."""
    checks = [TASK_CHECK, INPUT_REQUIRED_CHECK]
    results, output = kit_targets.run_kit(name, checks)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(checks, "SUCCESS"), output


def run(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(KIT), *options, "--timeout", "20"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def ledger(tmp_path, *server_options: str) -> str:
    return subprocess.list2cmdline(
        [
            sdk2_python(),
            "-m",
            "mcp_idempotency_demo.ledger_server",
            "--store",
            f"sqlite:{tmp_path / 'store.db'}",
            *server_options,
        ]
    )


def booking(*server_options: str) -> str:
    """idempotency/examples/booking.py, a server of the public API alone: one charge tool, no second one."""
    return subprocess.list2cmdline([sdk2_python(), str(BOOKING), "--store", "memory", *server_options])


def stand_in(script: str) -> str:
    return subprocess.list2cmdline([sdk2_python(), str(ROOT / "tests" / "stand_ins" / script), "--store", "memory"])


E1_NOT_TESTED = (
    "another tool's name under one key (E1) NOT tested (give --other-tool, a second tool taking the charge "
    "tool's arguments)"
)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(lambda: [booking(), *kit_targets.BOOKING_CONTRACT], id="a_server_whose_second_tool_is_not_named"),
        pytest.param(
            lambda: [stand_in("ignores_the_tool_name.py"), "--other-tool", "no_such_tool"],
            id="one_whose_fingerprint_ignores_the_tool_name_and_whose_second_tool_is_not_named",
        ),
    ],
)
def test_without_a_second_tool_the_tool_name_row_is_not_tested_and_the_run_does_not_exit_0(command, tmp_path):
    """E1's other half (another tool, same arguments) cannot run: the check is SKIPPED, NOT TESTED, never SUCCESS;
    the summary says what to give; the exit status is 3, not the 0 of a run that tested everything."""
    check = "sep-3182-different-requests-conflict"
    ran = run("--command", *command(), "--check", check, "--json", str(tmp_path / "checks.json"))
    (entry,) = json.loads((tmp_path / "checks.json").read_text())
    assert entry["status"] == "SKIPPED", ran.stdout
    assert entry["errorMessage"].startswith("NOT TESTED: another tool's name"), ran.stdout
    assert f"SKIPPED  {check}: values that differ after parsing are different requests -- NOT TESTED" in ran.stdout
    assert ran.stdout.splitlines()[-1] == f"sep-3182: 0 passed, 0 failed, 0 warnings, 1 skipped; {E1_NOT_TESTED}"
    assert ran.returncode == kit.NOT_ALL_TESTED == 3, ran.stdout


def test_a_not_tested_check_in_the_baseline_is_tolerated_and_the_run_exits_0(tmp_path):
    """The exit status 3 is about what nobody acknowledged: a baselined SKIPPED check is tolerated, as a failure is."""
    baseline = tmp_path / "expected.yaml"
    baseline.write_text("server:\n  - sep-3182-different-requests-conflict\n")
    ran = run(
        "--command",
        booking(),
        *kit_targets.BOOKING_CONTRACT,
        "--check",
        "sep-3182-different-requests-conflict",
        "--check",
        "sep-3182-repeat-executes-once",
        "--expected-failures",
        str(baseline),
    )
    assert ran.returncode == 0, ran.stdout
    assert ran.stdout.splitlines()[-1].startswith("sep-3182: 1 passed, 0 failed, 0 warnings, 1 skipped"), ran.stdout


def test_a_server_without_the_count_tool_is_one_failure_of_the_fixture_contract_not_one_per_check(tmp_path):
    """booking.py has no get_balance (the kit's default count tool): told so, the kit reports one FAILURE, which
    names the tool and every server lacking it; each check it could not run is SKIPPED, none failed one by one,
    and the run exits 2, as for a wrong command line."""
    contract = ["--charge-tool", "book_seats", "--amount-argument", "seats"]
    ran = run(
        "--command",
        booking(),
        "--slow-command",
        booking("--delay", "2"),
        *contract,
        "--json",
        str(tmp_path / "checks.json"),
    )
    report = json.loads((tmp_path / "checks.json").read_text())
    failures = [entry for entry in report if entry["status"] == "FAILURE"]
    assert ran.returncode == kit.WRONG_SETUP == 2, ran.stdout
    assert [entry["id"] for entry in failures] == ["sep-3182-fixture-contract"], ran.stdout
    (failure,) = failures
    assert failure["errorMessage"].startswith(
        "could not use the main and slow servers: the server lists no tool get_balance (the fixture contract"
    ), ran.stdout
    given = sum(check.needs in ("main", "slow") for check in kit.CHECKS)  # not those whose servers were not given
    assert failure["details"]["notRun"] == given
    assert {entry["status"] for entry in report if entry is not failure} == {"SKIPPED"}
    assert ran.stdout.count("FAILURE") == 1 and ran.stdout.count("lists no tool") == 1, ran.stdout


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


def test_an_oversized_key_echoed_only_in_the_conflict_answer_is_caught_on_the_conflict_path(tmp_path):
    """P2: the stand-in takes the megabyte key, and its first answer is small; the same key with other arguments
    gets a conflict that carries the megabyte back. The check measures both answers, and names the second."""
    check = "sep-3182-oversized-key-not-echoed"
    ran = run("--command", stand_in("echoes_an_oversized_key.py"), "--check", check, "--json", str(tmp_path / "c.json"))
    (entry,) = json.loads((tmp_path / "c.json").read_text())
    assert entry["status"] == "WARNING", ran.stdout  # a POSITION check
    said = "the same key with other arguments' answer is "
    assert entry["errorMessage"].startswith(said), ran.stdout
    assert int(entry["errorMessage"].removeprefix(said).split()[0]) > 1024 * 1024, ran.stdout


def test_a_server_that_offers_no_tasks_and_names_no_asking_tool_is_not_applicable_and_the_run_exits_0(tmp_path):
    """The rules of P24 and P25 bind a server that answers with tasks or questions: this one (no --tasks, no
    --input-required-tool) neither fails them nor is left NOT TESTED; the summary counts them apart."""
    checks = ["sep-3182-repeat-executes-once", TASK_CHECK, INPUT_REQUIRED_CHECK]
    ran = run(
        "--command", ledger(tmp_path), *[o for c in checks for o in ("--check", c)], "--json", str(tmp_path / "c.json")
    )
    report = {entry["id"]: entry for entry in json.loads((tmp_path / "c.json").read_text())}
    for check in (TASK_CHECK, INPUT_REQUIRED_CHECK):
        assert report[check]["status"] == "SKIPPED" and report[check]["details"]["applicable"] is False, ran.stdout
        assert report[check]["errorMessage"].startswith("not applicable: "), ran.stdout
    assert "io.modelcontextprotocol/tasks" in report[TASK_CHECK]["errorMessage"]
    assert "--input-required-tool" in report[INPUT_REQUIRED_CHECK]["errorMessage"]
    assert ran.stdout.splitlines()[-1] == "sep-3182: 1 passed, 0 failed, 0 warnings, 0 skipped, 2 not applicable"
    assert ran.returncode == 0, ran.stdout


def declares_tasks_runs_none(tmp_path) -> str:
    """tests/account_server.py declaring the tasks extension, with no tool run as a task."""
    script = ROOT / "tests" / "account_server.py"
    return subprocess.list2cmdline([sdk2_python(), str(script), "--tasks-store", f"sqlite:{tmp_path / 'store.db'}"])


@pytest.mark.parametrize(
    ("server", "kit_options", "check", "untested"),
    [
        pytest.param(
            declares_tasks_runs_none,
            ["--charge-tool", "charge", "--count-tool", "charges", "--tool-arguments", '{"account": "acme"}'],
            TASK_CHECK,
            "a lost task handle under a key (L7, P24)",
            id="tasks_offered_but_the_charge_tool_is_no_task",
        ),
        pytest.param(
            ledger,
            ["--input-required-tool", "no_such_tool"],
            INPUT_REQUIRED_CHECK,
            "an input-required answer under a key (E8, P25)",
            id="an_asking_tool_named_that_the_server_lacks",
        ),
    ],
)
def test_a_server_that_has_the_feature_but_not_the_kits_fixture_is_not_tested_and_the_run_exits_3(
    tmp_path, server, kit_options, check, untested
):
    """Where the rule binds the server but the kit lacked what it needs, the check is NOT TESTED, never not
    applicable: the summary names what to give, and the run exits 3."""
    ran = run(
        "--command",
        server(tmp_path),
        *kit_options,
        "--check",
        check,
        "--json",
        str(tmp_path / "c.json"),
    )
    (entry,) = json.loads((tmp_path / "c.json").read_text())
    assert entry["status"] == "SKIPPED" and entry["errorMessage"].startswith("NOT TESTED: "), ran.stdout
    assert "applicable" not in entry["details"], ran.stdout
    assert f"; {untested} NOT tested (give --" in ran.stdout.splitlines()[-1], ran.stdout
    assert ran.returncode == kit.NOT_ALL_TESTED, ran.stdout
