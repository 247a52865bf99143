"""The conformance kit (conformance/kit.py) against every server of this project, and the stand-ins.

    python3 tests/kit_targets.py                 # every target and stand-in; exit 0 only if each is as expected
    python3 tests/kit_targets.py ts-http          # some of them
    python3 tests/kit_targets.py --table FILE     # also write the results table (conformance/README.md has it)

Each target is started four times, as the kit's fixture contract asks: plain, with a
slow charge, with a one-second window, and with room for three records. A target of
ours must have no FAILURE, and no WARNING but those listed here with their reason; a
stand-in must fall short on exactly the checks its one broken rule covers.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from wire import ROOT, free_port, sdk2_python

sys.path.insert(0, str(ROOT / "conformance"))
import kit  # noqa: E402

KIT = ROOT / "conformance" / "kit.py"
TYPESCRIPT = ROOT / "typescript"
PYTHON_1X = sys.executable  # the interpreter that runs this has mcp 1.x, as conftest.py assumes for 1x-stdio
VARIANTS = {"": [], "slow-": ["--charge-delay", "2"], "short-retention-": ["--retention", "1"],
            "bounded-": ["--max-records", "3"]}
READY_SECONDS = 20


def python_2x(script: str) -> list[str]:
    """A script of this repository run by the mcp 2.x interpreter."""
    return [sdk2_python(), str(ROOT / script)]


# name -> (column title, transport, the server's command, extra kit options)
TARGETS = {
    "1x-stdio": ("1.x stdio", "stdio", lambda: [PYTHON_1X, str(ROOT / "server.py")], []),
    "2x-stdio": ("2.x stdio", "stdio", lambda: python_2x("sdk2/server.py"), []),
    "2x-http": ("2.x HTTP", "http", lambda: python_2x("sdk2/server.py"), []),
    "2x-http-2025": ("2.x HTTP, 2025 handshake", "http", lambda: python_2x("sdk2/server.py"),
                     ["--revision", "2025-11-25"]),
    "ts-stdio": ("TS stdio", "stdio", lambda: ["node", str(TYPESCRIPT / "server.mjs")], []),
    "ts-http": ("TS HTTP", "http", lambda: ["node", str(TYPESCRIPT / "server.mjs")], []),
}

# What a target of ours may fall short on, and why (a WARNING, never a FAILURE).
KNOWN_WARNINGS = {
    "ts-stdio": {"sep-3182-equivalence-large-integers": "JSON.parse reads every number as a double"},
    "ts-http": {"sep-3182-equivalence-large-integers": "JSON.parse reads every number as a double"},
}

# name -> the checks its one broken rule makes fall short (FAILURE or WARNING)
NO_DEDUPLICATION = {
    "repeat-executes-once", "replay-not-refreshed", "error-outcome-recorded", "conflict-leaves-the-record",
    "read-only-tool-deduplicated", "conflict-rejected", "conflict-error-data", "error-code",
    "equivalence-serialisation", "equivalence-numbers", "equivalence-strings", "equivalence-meta-ignored",
    "equivalence-absent-arguments", "different-requests-conflict", "equivalence-null-member",
    "equivalence-large-integers", "odd-keys-are-keys", "invalid-key-rejected",
    "in-flight-duplicate-not-executed", "in-flight-duplicate-rejected-at-once", "in-progress-error-data",
    "conflict-while-running", "cancelled-call-runs-once", "retention-window", "store-bound",
    "malformed-input-survived",
}
STAND_INS = {
    "ignores-the-key": ("ignores_the_key.py", NO_DEDUPLICATION),
    "replays-a-conflict": ("replays_a_conflict.py", {
        "conflict-rejected", "conflict-error-data", "error-code", "error-outcome-recorded",
        "different-requests-conflict", "equivalence-null-member", "equivalence-large-integers",
        "conflict-while-running"}),
    "queues-in-flight-duplicates": ("queues_in_flight_duplicates.py", {
        "in-flight-duplicate-rejected-at-once", "in-progress-error-data", "cancelled-call-runs-once"}),
    "drops-the-capability": ("drops_the_capability.py", {"capability-declared"}),
    "records-its-own-rejections": ("records_its_own_rejections.py", {
        "conflict-leaves-the-record", "cancelled-call-runs-once"}),
}
for name, (script, _) in STAND_INS.items():
    TARGETS[name] = (name, "stdio", lambda script=script: python_2x(f"tests/stand_ins/{script}"), [])


def with_store(command: list[str], folder: Path, variant: str) -> list[str]:
    """The 2.x servers and stand-ins get a SQLite store of their own per variant: each starts empty."""
    if "sdk2" in command[-1] or "stand_ins" in command[-1]:
        return [*command, "--store", f"sqlite:{folder / (variant or 'main')}.db"]
    return command


@contextmanager
def http_server(command: list[str]):
    """Start an HTTP server on a free loopback port; its URL until the block ends, then SIGTERM."""
    port = free_port()
    log = tempfile.TemporaryFile()
    process = subprocess.Popen([*command, "--transport", "http", "--port", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"{command} did not listen on {port}: {log.read().decode()[-500:]}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def typescript_installed() -> None:
    """The TypeScript server's packages, as its lockfile pins them (npm ci once, as tests/interop/run.sh does)."""
    if not (TYPESCRIPT / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=TYPESCRIPT, check=True, timeout=300)


def run_kit(name: str, checks: list[str] | None = None) -> tuple[list[dict], str]:
    """Run the kit against one target (only `checks`, if named): its checks.json entries and its printed output."""
    _, transport, command_of, extra = TARGETS[name]
    if name.startswith("ts-"):
        typescript_installed()
    needed = {"main"} | {check.needs for check in kit.CHECKS if not checks or check.id in checks}
    with tempfile.TemporaryDirectory() as folder, ExitStack() as servers:
        options = [option for check in checks or [] for option in ("--check", check)]
        for variant, server_args in VARIANTS.items():
            if (variant.rstrip("-").replace("-", "_") or "main") not in needed:
                continue
            command = [*with_store(command_of(), Path(folder), variant.rstrip("-")), *server_args]
            if transport == "stdio":
                options += [f"--{variant}command", subprocess.list2cmdline(command)]
            else:
                options += [f"--{variant}url", servers.enter_context(http_server(command))]
        report = Path(folder) / "checks.json"
        ran = subprocess.run([sys.executable, str(KIT), *options, *extra, "--timeout", "30", "--json", str(report)],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
        if not report.exists():
            raise RuntimeError(f"the kit wrote no report for {name}:\n{ran.stdout}\n{ran.stderr}")
        return json.loads(report.read_text(encoding="utf-8")), ran.stdout + ran.stderr


def short_of(results: list[dict]) -> set[str]:
    """The checks that fell short: FAILURE or WARNING."""
    return {entry["id"].removeprefix("sep-3182-") for entry in results if entry["status"] in ("FAILURE", "WARNING")}


def problems_of(name: str, results: list[dict]) -> list[str]:
    """What is not as this project expects for one target or stand-in."""
    short = short_of(results)
    if name in STAND_INS:
        expected = STAND_INS[name][1]
        return ([f"{name}: also falls short on {sorted(short - expected)}"] if short - expected else []) + \
               ([f"{name}: passes {sorted(expected - short)}, which its broken rule should fail"]
                if expected - short else [])
    allowed = {check.removeprefix("sep-3182-") for check in KNOWN_WARNINGS.get(name, {})}
    failures = {entry["id"] for entry in results if entry["status"] == "FAILURE"}
    return ([f"{name}: FAILURE of {sorted(failures)}"] if failures else []) + \
           ([f"{name}: falls short on {sorted(short - allowed)}"] if short - allowed else [])


def table(runs: dict) -> str:
    """The results as a markdown table: a row per check, a column per target."""
    names = list(runs)
    ids = [entry["id"] for entry in next(iter(runs.values()))]
    short = {"SUCCESS": "pass", "FAILURE": "**FAIL**", "WARNING": "*warn*", "SKIPPED": "skip", "INFO": "info"}
    lines = ["| check | " + " | ".join(TARGETS[name][0] for name in names) + " |",
             "|---|" + "---|" * len(names)]
    for check_id in ids:
        cells = [short[next(e["status"] for e in runs[name] if e["id"] == check_id)] for name in names]
        lines.append(f"| `{check_id}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"targets and stand-ins (default: all): {', '.join(TARGETS)}")
    parser.add_argument("--table", metavar="FILE", help="write the results table to FILE")
    options = parser.parse_args(argv)
    unknown = set(options.names) - set(TARGETS)
    if unknown:
        parser.error(f"no target named {', '.join(sorted(unknown))}")
    runs, problems = {}, []
    for name in options.names or list(TARGETS):
        print(f"\n=== the kit against {name}", flush=True)
        runs[name], output = run_kit(name)
        print(output, end="", flush=True)
        problems += problems_of(name, runs[name])
    if options.table:
        Path(options.table).write_text(table(runs), encoding="utf-8")
    print()
    for problem in problems:
        print(problem)
    print(f"kit_targets: {len(runs) - len({p.split(':')[0] for p in problems})} passed, "
          f"{len({p.split(':')[0] for p in problems})} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
