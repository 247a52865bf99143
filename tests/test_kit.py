"""The conformance kit (conformance/): its requirements file, its exit rules and options, and what it
finds against every server of ours and every stand-in that breaks one rule."""

import http.server
import json
import subprocess
import sys
import threading

import kit_targets
import pytest
from kit_targets import kit
from wire import ONE_PER_SDK, ROOT, SDK2_SERVER, sdk2_python

REQUIREMENTS = kit.load_requirements(ROOT / "conformance" / "sep-3182.yaml")["requirements"]
CHECK_IDS = {check.id for check in kit.CHECKS}


# ----------------------------------------------------------------------------
# The requirements file: every requirement traced
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=lambda requirement: requirement.get("check", "excluded"))
def test_every_requirement_names_a_check_or_a_reason(requirement):
    assert requirement.get("text"), requirement
    assert bool(requirement.get("check")) != bool(requirement.get("excluded")), requirement


@pytest.mark.parametrize("check_id", sorted({r["check"] for r in REQUIREMENTS if r.get("check")}))
def test_every_check_the_requirements_name_exists(check_id):
    assert check_id in CHECK_IDS


@pytest.mark.parametrize("check", kit.CHECKS, ids=lambda check: check.id)
def test_every_check_tests_a_requirement_or_a_position_of_ours(check):
    traced = any(requirement.get("check") == check.id for requirement in REQUIREMENTS)
    assert traced or check.severity == "POSITION"
    assert check.id.startswith("sep-3182-")


def test_a_requirement_without_check_or_reason_is_caught(tmp_path):
    """The trace test above can fail: an entry with only a text is read as such."""
    broken = tmp_path / "sep.yaml"
    broken.write_text("sep: 0000\nrequirements:\n  - text: 'A server MUST NOT run it twice.'\n")
    (entry,) = kit.load_requirements(broken)["requirements"]
    assert entry == {"text": "A server MUST NOT run it twice."}


# ----------------------------------------------------------------------------
# The official exit rules and baseline file
# ----------------------------------------------------------------------------


def entries(**statuses) -> list[dict]:
    return [{"id": f"sep-3182-{name.replace('_', '-')}", "status": status} for name, status in statuses.items()]


@pytest.mark.parametrize(
    ("statuses", "baseline", "status"),
    [
        pytest.param({"a": "FAILURE"}, {"sep-3182-a"}, 0, id="fails_and_baselined_expected"),
        pytest.param({"a": "FAILURE"}, set(), 1, id="fails_not_baselined_regression"),
        pytest.param({"a": "SUCCESS"}, {"sep-3182-a"}, 1, id="passes_and_baselined_stale"),
        pytest.param({"a": "SUCCESS"}, set(), 0, id="passes_not_baselined"),
        pytest.param({"a": "SKIPPED"}, {"sep-3182-a", "sep-3182-gone"}, 0, id="baselined_skipped_or_absent_tolerated"),
        pytest.param({"a": "WARNING"}, set(), 0, id="a_warning_is_no_failure"),
        pytest.param(
            {"a": "SKIPPED", "b": "SUCCESS"}, set(), 3, id="not_tested_and_not_baselined_claims_no_conformance"
        ),
        pytest.param({"a": "SKIPPED", "b": "FAILURE"}, set(), 1, id="a_failure_outweighs_a_check_not_tested"),
        pytest.param({"a": "SKIPPED", "fixture_contract": "FAILURE"}, set(), 2, id="a_broken_fixture_is_no_rules"),
        pytest.param(
            {"a": "FAILURE", "fixture_contract": "FAILURE"},
            {"sep-3182-fixture-contract"},
            2,
            id="a_broken_fixture_outweighs_a_failure_and_the_baseline",
        ),
    ],
)
def test_exit_status_follows_the_official_rules(statuses, baseline, status):
    assert kit.exit_status(entries(**statuses), baseline)[0] == status


def test_baseline_is_read_in_the_official_shape(tmp_path):
    baseline = tmp_path / "expected-failures.yaml"
    baseline.write_text("server:\n  - sep-3182-a  # known\n  - 'sep-3182-b'\n  - some-scenario:sep-3182-c\n")
    assert kit.read_baseline(baseline) == {"sep-3182-a", "sep-3182-b", "sep-3182-c"}


@pytest.mark.parametrize("newline", ["\r\n", "\n", "\r"], ids=["crlf", "lf", "cr"])
def test_an_sse_answer_after_a_progress_event_is_read_whatever_ends_its_lines(newline):
    """SSE lines end in CRLF, LF or CR (the 2.x server sends CRLF): the answer after a progress event is found."""
    events = ['data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}', 'data: {"jsonrpc":"2.0","id":7}']
    body = newline.join(line for event in events for line in ("event: message", event, "")) + newline
    assert json.loads(kit.answer_in_stream(body, 7)) == {"jsonrpc": "2.0", "id": 7}


# ----------------------------------------------------------------------------
# The command line, end to end
# ----------------------------------------------------------------------------


def run(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "conformance" / "kit.py"), *options],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def stdio_command(script: str | None, tmp_path) -> str:
    """The 2.x ledger server (no script) or a stand-in script, on a SQLite store of its own, keys in the SEP's field."""
    server = SDK2_SERVER if script is None else [str(ROOT / script)]
    store = ["--store", f"sqlite:{tmp_path / 'store.db'}"]
    return subprocess.list2cmdline([sdk2_python(), *server, *store, "--placement", "params"])


def test_list_prints_every_check():
    listed = run("--list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [check.id for check in kit.CHECKS]


def test_a_failing_check_fails_the_run_unless_baselined_and_a_stale_baseline_fails_it(tmp_path):
    stand_in = stdio_command("tests/stand_ins/drops_the_capability.py", tmp_path)
    baseline = tmp_path / "expected.yaml"
    baseline.write_text("server:\n  - sep-3182-capability-declared\n")
    chosen = ["--check", "sep-3182-capability-declared", "--check", "sep-3182-repeat-executes-once"]
    chosen += ["--placement", "params"]  # the stand-in drops the field's capability, so no placement can be read

    regression = run("--command", stand_in, *chosen, "--json", str(tmp_path / "checks.json"))
    expected = run("--command", stand_in, *chosen, "--expected-failures", str(baseline))
    stale = run("--command", stdio_command(None, tmp_path), *chosen, "--expected-failures", str(baseline))

    assert regression.returncode == 1, regression.stdout
    assert regression.stdout.splitlines()[-1] == "sep-3182: 1 passed, 1 failed, 0 warnings, 0 skipped"
    assert expected.returncode == 0, expected.stdout
    assert stale.returncode == 1 and "stale baseline: sep-3182-capability-declared" in stale.stdout
    report = json.loads((tmp_path / "checks.json").read_text())
    assert [entry["status"] for entry in report] == ["FAILURE", "SUCCESS"]
    for entry in report:  # the official checks.json fields
        assert {"id", "name", "description", "status", "timestamp", "specReferences", "details"} <= set(entry)


def test_bearer_and_header_options_reach_an_http_server():
    seen = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(dict(self.headers))
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    try:
        refused = run(
            "--url",
            f"http://127.0.0.1:{listener.server_port}/mcp",
            "--bearer",
            "t0ken",
            "--header",
            "X-Tenant: acme",
            "--check",
            "sep-3182-capability-declared",
            "--timeout",
            "5",
        )
    finally:
        listener.shutdown()
    assert refused.returncode == kit.WRONG_SETUP and "could not use the main server" in refused.stdout
    assert seen and all(
        headers["Authorization"] == "Bearer t0ken" and headers["X-Tenant"] == "acme" for headers in seen
    )


# ----------------------------------------------------------------------------
# Against every server of ours, and every stand-in (tests/kit_targets.py; .ci/run does the same)
# ----------------------------------------------------------------------------

# P3 (E1-E7, S3, S3b): "the same request", spelled as raw JSON text. These rows live
# in the kit only (one body of checks); test_equivalence.py keeps what is ours alone, the
# numbers a double cannot hold.
EQUIVALENCE = [
    "sep-3182-equivalence-serialisation",
    "sep-3182-equivalence-numbers",
    "sep-3182-equivalence-strings",
    "sep-3182-equivalence-meta-ignored",
    "sep-3182-equivalence-absent-arguments",
    "sep-3182-different-requests-conflict",
    "sep-3182-equivalence-null-member",
    "sep-3182-large-integers-exact",
    "sep-3182-conflict-error-data",
    "sep-3182-error-code",
]


# The kit's rule checks read the same on either 2.x transport: the quick set runs them on one transport per SDK, the
# slow set on every target (and the whole kit against every server besides).
@pytest.mark.quick_targets(*ONE_PER_SDK)
def test_kit_equivalence_rows_pass_on_every_target(target):
    """Each spelling of one request replays; each different request under the key is a conflict."""
    results, output = kit_targets.run_kit(target, EQUIVALENCE)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(EQUIVALENCE, "SUCCESS"), output
    # P5 on every conflict row, not only the one conflict-error-data checks: -32602, type and key.
    assert all(entry["details"].get("unshaped", {}) == {} for entry in results), output


@pytest.mark.quick_targets(*ONE_PER_SDK)
def test_kit_retention_and_bound_rows_pass_on_every_target(target):
    """P8 (--retention 1): a key replays inside its window and runs anew after it. P9 (--max-records 3): a new
    key is refused with -32602 idempotency_store_full and its key; replays and unkeyed calls carry on."""
    rows = ["sep-3182-retention-window", "sep-3182-store-bound"]
    results, output = kit_targets.run_kit(target, rows)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(rows, "SUCCESS"), output
    assert all("unshaped" not in entry["details"] for entry in results), output


# What the rule rows of test_keys.py, test_outcomes.py and test_outcome_kinds.py pin, as the kit sees it on the main
# server alone (two seconds a server): the quick set holds every target to them here, 2x-stdio included, whose
# own runs of those rows are in the slow set.
MAIN_SERVER_ROWS = [
    "sep-3182-capability-declared",
    "sep-3182-capability-settings",
    "sep-3182-repeat-executes-once",
    "sep-3182-replay-not-refreshed",
    "sep-3182-error-outcome-recorded",
    "sep-3182-conflict-leaves-the-record",
    "sep-3182-read-only-tool-deduplicated",
    "sep-3182-conflict-rejected",
    "sep-3182-key-only-in-params",
    "sep-3182-no-key-runs-every-time",
    "sep-3182-odd-keys-are-keys",
    "sep-3182-invalid-key-rejected",
    "sep-3182-oversized-key-not-echoed",
    "sep-3182-other-methods-ignore-the-key",
]


def test_kit_main_server_rows_pass_on_every_target(target):
    """Capability, replay, conflict, what a key is and where, and what no key is: every server alike."""
    results, output = kit_targets.run_kit(target, MAIN_SERVER_ROWS)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(MAIN_SERVER_ROWS, "SUCCESS"), output


# The TypeScript server's run, and the 2.x server's over stdio (the lease is the layer's, not the transport's), are in
# the slow set, where the whole kit holds them to this check as well.
SLOW = [pytest.param(server, marks=pytest.mark.slow) for server in ("2x-stdio", "ts-stdio")]


@pytest.mark.targets("1x-stdio", "2x-stdio", "2x-http")  # and the TypeScript server, which is no target
@pytest.mark.parametrize("server", ["1x-stdio", "2x-http", *SLOW])
def test_a_charge_three_times_slower_than_its_lease_is_never_taken_over_on_any_server(server):
    """P18': retried every half second past its lease, the charge is refused as in progress at once until it
    completes, replays then, and charged once: the 2.x server renews its lease; one process has none."""
    check = "sep-3182-live-run-never-taken-over"
    results, output = kit_targets.run_kit(server, [check])
    assert [(entry["id"], entry["status"]) for entry in results] == [(check, "SUCCESS")], output
    assert max(results[0]["details"]["in progress at"]) > 2, output  # twice the lease and more


@pytest.mark.targets("2x-stdio", "2x-http")
@pytest.mark.parametrize("server", ["2x-stdio", "2x-http"])
def test_a_charge_that_outlasts_its_deadline_leaves_its_key_in_progress_no_longer_than_deadline_and_lease(server):
    """P31: on a one-second deadline and lease, a six-second charge is stopped, and no retry sent past the two
    together is told it is in progress; one process (1.x, TypeScript) advertises neither, and is not asked."""
    check = "sep-3182-in-progress-ends-by-the-deadline"
    results, output = kit_targets.run_kit(server, [check])
    assert [(entry["id"], entry["status"]) for entry in results] == [(check, "SUCCESS")], output


# The TypeScript server's run is in the slow set, where the whole kit holds it to this check as well.
@pytest.mark.parametrize("server", ["2x-stdio-meta", pytest.param("ts-stdio-meta", marks=pytest.mark.slow)])
def test_a_keyed_result_and_its_replay_carry_the_same_acknowledgement_in_the_extensions_placement(server):
    """P33: in the extension's placement the first answer names its key in _meta, and the replay the same."""
    check = "sep-3182-result-acknowledged"
    results, output = kit_targets.run_kit(server, [check])
    assert [(entry["id"], entry["status"]) for entry in results] == [(check, "SUCCESS")], output
    assert list(results[0]["details"]["acknowledgement"]) == ["idempotencyKey"], output


def test_the_acknowledgement_is_not_asked_of_a_server_in_the_seps_field():
    """server.py, the reference of the SEP's field, names no extension: the check binds it not, and says so."""
    check = "sep-3182-result-acknowledged"
    results, output = kit_targets.run_kit("1x-stdio", [check])
    assert [(entry["status"], kit.applicable(entry)) for entry in results] == [("SKIPPED", False)], output
    assert results[0]["errorMessage"].startswith("not applicable: the acknowledgement is the extension's"), output


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", [name for name in kit_targets.TARGETS if name not in kit_targets.STAND_INS])
def test_kit_passes_against_every_server_of_ours(name):
    results, output = kit_targets.run_kit(name)
    assert kit_targets.problems_of(name, results) == [], output


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(kit_targets.STAND_INS))
def test_each_stand_in_falls_short_on_exactly_the_checks_of_its_broken_rule(name):
    results, output = kit_targets.run_kit(name)
    assert kit_targets.short_of(results) == kit_targets.STAND_INS[name][1], output


def test_authorisation_checks_without_their_credentials_are_not_run_and_the_summary_says_so(tmp_path):
    """K2 and K3 need a second principal's token and a narrowed one: without them, SKIPPED, never passed."""
    chosen = ["sep-3182-key-scoped-to-principal", "sep-3182-replay-rechecks-authorisation"]
    ran = run(
        "--command",
        stdio_command(None, tmp_path),
        *[o for c in chosen for o in ("--check", c)],
        "--json",
        str(tmp_path / "checks.json"),
    )
    report = json.loads((tmp_path / "checks.json").read_text())
    assert ran.returncode == kit.NOT_ALL_TESTED, ran.stdout  # nothing failed, but not everything was tested
    assert [(entry["status"], entry["details"]["credential"]) for entry in report] == [
        ("SKIPPED", "second_bearer"),
        ("SKIPPED", "narrowed_bearer"),
    ]
    assert ran.stdout.splitlines()[-1] == (
        "sep-3182: 0 passed, 0 failed, 0 warnings, 2 skipped; keys across principals (K2) NOT tested "
        "(give --second-bearer); a replay's authorisation (K3) NOT tested (give --narrowed-bearer)"
    )
