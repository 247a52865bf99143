"""The official MCP conformance suite's task scenarios against our Tasks (SEP-2663): docs/official-conformance.md.

    python3 tests/official_conformance_table.py            # run every task scenario, print the table
    python3 tests/official_conformance_table.py --write    # and put it in docs/official-conformance.md

It runs the suite that tests/official_conformance/package-lock.json pins (`npm ci` there first unless it
is installed from that lockfile), with the Node.js it pins too (the suite imports fs.globSync: Node 22), against
two servers over HTTP, each on a fresh SQLite store: the 2.x ledger server with --tasks, as a user runs it,
and tests/official_conformance/fixture_server.py, the same layer and Tasks with the tools the suite calls
by name. Every status in the table is what that run's checks.json said; the reasons beside them are
written here, and a check that does not pass and has none stops the run.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kit_targets import http_servers, ledger_server, with_table
from node_packages import npm_installed
from wire import ROOT, sdk2_python

SUITE = ROOT / "tests" / "official_conformance"
NODE = SUITE / "node_modules" / ".bin" / "node"
CONFORMANCE = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance"
DOC = ROOT / "docs" / "official-conformance.md"
MARKS = ("<!-- table: tests/official_conformance_table.py --write writes from here -->", "<!-- to here -->")
SCENARIO_SECONDS = 120  # one scenario, bounded: the slowest (tasks-lifecycle) takes about 10 s
# The suite's statuses as the table writes them; "(not run)": that server's run gave no such check.
STATUS = {"SUCCESS": "pass", "FAILURE": "**fail**", "SKIPPED": "skipped", "WARNING": "warning", None: "(not run)"}

# Why each check that does not simply pass on both servers is as it is, keyed by check id; the notes
# [1]-[6] are docs/official-conformance.md's, under the table.
NO_TASK_TOOL = "ledger: no task fixture [1]"
HOLLOW = "ledger: passes on `Unknown tool` [2]"
NO_INPUT_IN_A_TASK = "both: no input inside a task [3]"
WHY = {
    "tasks-sync-tool-call": HOLLOW,
    "sep-2663-result-type-task-on-create": NO_TASK_TOOL,
    "sep-2663-tasks-get-status-working": NO_TASK_TOOL,
    "sep-2663-tasks-get-status-completed": NO_TASK_TOOL,
    "sep-2663-tool-error-uses-completed-status": NO_TASK_TOOL,
    "sep-2663-tasks-get-status-failed": NO_TASK_TOOL,
    "sep-2663-cancel-ack-empty-result": NO_TASK_TOOL,
    "tasks-cancel-terminal-idempotent-ack": NO_TASK_TOOL,
    "sep-2663-server-rejects-undeclared-client": HOLLOW,
    "tasks-per-request-meta-opt-in": NO_TASK_TOOL,
    "tasks-wire-field-renames": NO_TASK_TOOL,
    "tasks-no-early-ttl-expiry": NO_TASK_TOOL,
    "tasks-no-related-task-meta-on-inlined-result": NO_TASK_TOOL,
    "tasks-request-state-removal-setup": NO_TASK_TOOL + "; once a task exists, the next two run instead",
    "tasks-create-result-no-request-state": "run only once a task exists",
    "tasks-get-detailed-no-request-state": "run only once a task exists",
    "sep-2663-tasks-get-status-input-required": NO_INPUT_IN_A_TASK,
    "tasks-mrtr-tasks-update-resumes": NO_INPUT_IN_A_TASK,
    "tasks-mrtr-partial-fulfillment": NO_INPUT_IN_A_TASK,
    "tasks-headers-tolerate-mcp-method-on-tools-call": "ledger: no `greet` [1]",
    "sep-2663-routing-headers-accepted-on-tasks-get": NO_TASK_TOOL,
    "sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get": NO_TASK_TOOL,
    "tasks-server-directed-creation-no-hint": NO_TASK_TOOL,
    "sep-2663-legacy-task-param-ignored": HOLLOW,
    "tasks-immediate-result-shortcut": HOLLOW,
    "tasks-result-type-complete-on-non-task-responses": HOLLOW + "; fixtures: its `tasks/update` part not run [3]",
    "sep-2663-durable-create-strong-consistency": NO_TASK_TOOL,
    "tasks-status-notifications": "both: skipped by the suite itself [6]",
    "sep-2663-server-returns-missing-capability-when-required": "both: no tool requires a task [4]",
    "sep-2663-mrtr-synchronous-before-task-creation": "both: no input before a task [5]",
}


def suite(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the pinned suite's command line under the pinned Node.js."""
    command = [str(NODE), str(CONFORMANCE / "dist" / "index.js"), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=SUITE)


def version() -> str:
    """The installed suite's version."""
    return json.loads((CONFORMANCE / "package.json").read_text(encoding="utf-8"))["version"]


def task_scenarios() -> list[str]:
    """Every server scenario of the tasks extension that the suite lists, in its order."""
    listed = suite("list").stdout
    return re.findall(r"^\s*- (tasks-[a-z0-9-]+) \[extension\]$", listed.split("Client scenarios")[0], re.MULTILINE)


def run_scenario(url: str, scenario: str, output: Path) -> dict[str, str]:
    """One scenario against one server: each check's id and status, as its checks.json says."""
    ran = suite("server", "--url", url, "--scenario", scenario, "-o", str(output), timeout=SCENARIO_SECONDS)
    written = list(output.glob("*/checks.json"))
    if len(written) != 1:
        raise RuntimeError(f"{scenario} against {url} wrote no checks.json:\n{ran.stdout[-2000:]}{ran.stderr[-2000:]}")
    return {check["id"]: check["status"] for check in json.loads(written[0].read_text(encoding="utf-8"))}


def servers(folder: Path) -> list[list[str]]:
    """The ledger server with --tasks, and the fixture server, each on a SQLite store of its own."""
    return [
        [*ledger_server(), "--placement", "params", "--tasks", "--store", f"sqlite:{folder / 'ledger.db'}"],
        [sdk2_python(), str(SUITE / "fixture_server.py"), "--store", f"sqlite:{folder / 'fixtures.db'}"],
    ]


def measured() -> dict:
    """Every task scenario against both servers: {"version", "scenarios": {scenario: {"ledger", "fixtures"}}}."""
    npm_installed(SUITE)
    results: dict = {"version": version(), "scenarios": {}}
    with tempfile.TemporaryDirectory() as folder, http_servers(servers(Path(folder))) as (ledger, fixtures):
        for scenario in task_scenarios():
            results["scenarios"][scenario] = {
                server: run_scenario(url, scenario, Path(folder) / server / scenario)
                for server, url in (("ledger", ledger), ("fixtures", fixtures))
            }
    return results


def rows_of(scenario: str, statuses: dict[str, dict[str, str]]) -> list[str]:
    """One row per check either server's run gave, in the order the suite emitted them."""
    checks = list(dict.fromkeys([*statuses["ledger"], *statuses["fixtures"]]))
    rows = []
    for check in checks:
        ledger, fixtures = statuses["ledger"].get(check), statuses["fixtures"].get(check)
        if {ledger, fixtures} != {"SUCCESS"} and check not in WHY:
            raise RuntimeError(f"{scenario}: {check} is {ledger} on the ledger, {fixtures} on the fixtures: say why")
        rows.append(f"| {scenario} | `{check}` | {STATUS[ledger]} | {STATUS[fixtures]} | {WHY.get(check, '')} |")
    return rows


def table(results: dict) -> str:
    """The measured table, in markdown."""
    head = [
        f"Suite `@modelcontextprotocol/conformance` {results['version']}:",
        "",
        "| scenario | check | ledger server `--tasks` | fixture server | why |",
        "|---|---|---|---|---|",
    ]
    body = [row for scenario, statuses in results["scenarios"].items() for row in rows_of(scenario, statuses)]
    return "\n".join(head + body) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="put the table in docs/official-conformance.md")
    options = parser.parse_args(argv)
    markdown = table(measured())
    if options.write:
        DOC.write_text(with_table(DOC, MARKS, markdown), encoding="utf-8")
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
