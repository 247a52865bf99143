"""The conformance kit (conformance/kit.py) against every server of this project, and the stand-ins.

    python3 tests/kit_targets.py                 # every target and stand-in; exit 0 only if each is as expected
    python3 tests/kit_targets.py ts-http          # some of them
    python3 tests/kit_targets.py --readme         # all, and put the results table in conformance/README.md

Each target is started six times, as the kit's fixture contract asks: plain, with a
slow charge, with a one-second window, with room for three records, with a
one-second lease on a three-second charge, and with a one-second deadline and lease
on a six-second charge. A target of
ours must have no FAILURE, and no WARNING but those listed here with their reason; a
stand-in must fall short on exactly the checks its one broken rule covers.
"""

import argparse
import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

from node_packages import TYPESCRIPT, typescript_built
from oauth import READ, RESOURCE, Issuer
from stand_in_table import STAND_INS, SWITCHED
from wire import ROOT, SDK2_SERVER, free_port, sdk2_python

KIT = ROOT / "conformance" / "kit.py"
# The kit is one file that outsiders run as it is, not a package: loaded from its path.
_spec = importlib.util.spec_from_file_location("kit", KIT)
kit = importlib.util.module_from_spec(_spec)
sys.modules["kit"] = kit
_spec.loader.exec_module(kit)
PYTHON_1X = sys.executable  # the interpreter that runs this has mcp 1.x, as conftest.py assumes for 1x-stdio
VARIANTS = {
    "": [],
    "slow-": ["--charge-delay", "2"],
    "short-retention-": ["--retention", "1"],
    "bounded-": ["--max-records", "3"],
    # a charge that outlasts its one-second lease by two seconds (kit.py's --short-lease default); the lease
    # is the 2.x servers' alone (SHORT_LEASE, with_store): one process has none, its run is never taken over
    "short-lease-": ["--charge-delay", "3"],
    # a charge that outlasts a one-second deadline and lease by four seconds; the 2.x and TypeScript servers advertise
    # the two (SHORT_DEADLINE, with_store), server.py does not, so it is not asked about them
    "short-deadline-": ["--charge-delay", "6"],
}
SHORT_LEASE = ["--lease", "1"]
SHORT_DEADLINE = ["--deadline", "1", "--lease", "1"]
READY_SECONDS = 20
META = ["--placement", "meta"]  # P26 on the server's command line, and the same on the kit's
FIELD = ["--placement", "params"]  # the SEP's field, which the 2.x targets and stand-ins mean (the default is _meta)
# P25: the 2.x ledger server's tool that asks the user to confirm before it charges (2026-07-28).
ASKS_FIRST = ["--input-required-tool", "charge_confirmed"]

EXAMPLES = ROOT / "idempotency" / "examples"
# What the kit is told of idempotency/examples/booking.py's tools (its second tool is not named here).
BOOKING_CONTRACT = [
    "--charge-tool",
    "book_seats",
    "--amount-argument",
    "seats",
    "--count-tool",
    "bookings",
    "--count-field",
    "bookings",
]


def python_2x(script: str) -> list[str]:
    """A script of this repository run by the mcp 2.x interpreter."""
    return [sdk2_python(), str(ROOT / script)]


def ledger_server() -> list[str]:
    """The package's 2.x ledger server, run by the mcp 2.x interpreter."""
    return [sdk2_python(), *SDK2_SERVER]


def field_server() -> list[str]:
    """The 2.x ledger server in the SEP's field placement, which these targets mean (its default is _meta)."""
    return [*ledger_server(), *FIELD]


def typescript_server() -> list[str]:
    """The TypeScript server, compiled (typescript_built)."""
    return ["node", str(TYPESCRIPT / "dist" / "server.js")]


# name -> (column title, transport, the server's command, extra kit options)
TARGETS = {
    "1x-stdio": ("1.x stdio", "stdio", lambda: [PYTHON_1X, str(ROOT / "server.py")], []),
    "2x-stdio": ("2.x stdio", "stdio", field_server, ASKS_FIRST),
    "2x-http": ("2.x HTTP", "http", field_server, ASKS_FIRST),
    "2x-http-2025": ("2.x HTTP, 2025 handshake", "http", field_server, ["--revision", "2025-11-25"]),
    "2x-http-auth": ("2.x HTTP, authorisation", "http", field_server, ASKS_FIRST),
    # Closing an SSE response stream is cancellation (2026-07-28): the kit's cancel checks meet it.
    "2x-http-sse": ("2.x HTTP, SSE", "http", lambda: [*field_server(), "--sse"], ASKS_FIRST),
    # P26: the key as an extension, in request _meta, and the capability in capabilities.extensions.
    "2x-stdio-meta": ("2.x stdio, _meta placement", "stdio", lambda: [*ledger_server(), *META], [*META, *ASKS_FIRST]),
    "2x-http-meta": ("2.x HTTP, _meta placement", "http", lambda: [*ledger_server(), *META], [*META, *ASKS_FIRST]),
    # P24: the charges run as tasks for a request that declares the extension (a SQL store: with_store).
    "2x-stdio-tasks": ("2.x stdio, tasks", "stdio", lambda: [*field_server(), "--tasks"], ASKS_FIRST),
    "2x-http-tasks": ("2.x HTTP, tasks", "http", lambda: [*field_server(), "--tasks"], ASKS_FIRST),
    "ts-stdio": ("TS stdio", "stdio", lambda: ["node", str(TYPESCRIPT / "dist" / "server.js")], []),
    "ts-http": ("TS HTTP", "http", lambda: ["node", str(TYPESCRIPT / "dist" / "server.js")], []),
    "ts-stdio-meta": ("TS stdio, _meta placement", "stdio", lambda: [*typescript_server(), *META], META),
    "ts-http-meta": ("TS HTTP, _meta placement", "http", lambda: [*typescript_server(), *META], META),
}

# What a target of ours may fall short on, and why (a WARNING, never a FAILURE). None, once the servers
# meet issue 25 (branch issue-25-servers): the TypeScript server, whose JSON.parse reads every number as a
# double, refuses a keyed call holding an integer past 2^53 (sep-3182-large-integers-exact) instead of
# warning as it did under the old sep-3182-equivalence-large-integers.
KNOWN_WARNINGS: dict[str, dict[str, str]] = {}

# Behind authorisation (mcp_idempotency/auth.py): served over HTTP, trusting the real issuer (tests/oauth.py),
# and checked with Alice's token, Bob's, and Alice's without the charge scope (K2, K3). Their bounded server
# gives each principal two of its three records (P9'), so that Alice filling hers leaves room for Bob.
AUTHORISED = {
    "2x-http-auth",
    "shares-keys-across-principals",
    "replays-without-rechecking-scope",
    "bounds-only-the-whole-store",
}
SHARE_OF_THE_BOUNDED = ["--max-records-per-principal", "2"]
# The stand-ins served otherwise than on stdio with no options: (transport, the server's options, the kit's).
SERVED = {
    "makes-a-task-per-call": ("stdio", ["--tasks"], []),
    "keeps-the-question": ("stdio", [], ASKS_FIRST),
    "reads-the-key-in-both-places-meta": ("stdio", META, META),  # fails the same check in the other placement
    "drops-the-acknowledgement": ("stdio", META, META),  # the acknowledgement is the extension's placement's
    "drops-the-acknowledgement-from-replays": ("stdio", [*META, "--from", "replays"], META),
    "stops-its-run-when-the-stream-closes": ("http", ["--sse"], []),  # its stream is closed mid-call (P7)
    **{name: ("http", [], []) for name in AUTHORISED if name in STAND_INS},
    **{name: ("stdio", switch, []) for name, switch in SWITCHED.items()},
}
for name, (script, _) in STAND_INS.items():
    transport, server_options, kit_options = SERVED.get(name, ("stdio", [], []))
    placement = [] if "--placement" in server_options else FIELD  # told to the kit too: some break the capability
    TARGETS[name] = (
        name,
        transport,
        lambda script=script, server_options=[*server_options, *placement]: [
            *python_2x(f"tests/stand_ins/{script}"),
            *server_options,
        ],
        [*kit_options, *placement],
    )

ISSUE_25_CHECKS = [
    "sep-3182-rejection-retryable",
    "sep-3182-capability-settings",
    "sep-3182-large-integers-exact",
    "sep-3182-live-run-never-taken-over",
]


def with_store(command: list[str], folder: Path, variant: str, memory: bool) -> list[str]:
    """The 2.x servers and stand-ins get a store of their own per variant, each empty at first: a SQLite file, or
    the process's memory (a stand-in's rule is the layer's, whatever the store), but with --tasks, whose tasks
    live in a SQL store; and the short-lease variant its lease, the short-deadline one its deadline and lease."""
    if command[1:3] == SDK2_SERVER or "stand_ins" in command[1]:
        in_memory = memory and "--tasks" not in command
        store = ["--store", "memory" if in_memory else f"sqlite:{folder / (variant or 'main')}.db"]
        bounds = {"short-lease": SHORT_LEASE, "short-deadline": SHORT_DEADLINE}.get(variant, [])
        return [*command, *store, *bounds]
    if any(part.endswith("server.js") for part in command):  # the TypeScript server bounds its runs too
        return [*command, *(SHORT_DEADLINE if variant == "short-deadline" else [])]
    return command


@contextmanager
def http_process(command: list[str]):
    """Start an HTTP server on a free loopback port, without waiting for it; SIGTERM when the block ends."""
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (the server's stderr, open as long as it runs)
    process = subprocess.Popen([*command, "--transport", "http", "--port", str(port)], stdout=log, stderr=log)
    try:
        yield command, process, port, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listening(command: list[str], process: subprocess.Popen, port: int, log) -> str:
    """The URL of a server just started, once it accepts connections."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{command} did not listen on {port}: {log.read().decode()[-500:]}") from None
            time.sleep(0.1)


@contextmanager
def http_servers(commands: list[list[str]]):
    """Start HTTP servers all at once (each takes a second or two to import its SDK); their URLs, in order."""
    with ExitStack() as stack:
        started = [stack.enter_context(http_process(command)) for command in commands]
        yield [listening(*each) for each in started]


def authorised(servers: ExitStack) -> tuple[list[str], list[str]]:
    """The real issuer, running until `servers` closes: the server's options to trust it, and the kit's tokens."""
    issuer = servers.enter_context(closing(Issuer()))
    return (
        ["--issuer", issuer.url, "--resource", RESOURCE],
        [
            "--bearer",
            issuer.token("alice"),
            "--second-bearer",
            issuer.token("bob"),
            "--narrowed-bearer",
            issuer.token("alice", READ),
        ],
    )


def run_kit(
    name: str, checks: list[str] | None = None, timeout: float = 30, memory: bool = False
) -> tuple[list[dict], str]:
    """Run the kit against one target (only `checks`, if named): its checks.json entries and its printed output.
    `timeout` is the kit's wait for one answer, and how long a check waits for a key to settle: a stand-in
    that never settles it fails only once it has passed. `memory`: the 2.x servers on the memory store."""
    _, transport, command_of, extra = TARGETS[name]
    if name.startswith("ts-"):
        typescript_built()
    needed = {"main"} | {
        variant for check in kit.CHECKS if not checks or check.id in checks for variant in (check.needs, *check.uses)
    }
    with tempfile.TemporaryDirectory() as folder, ExitStack() as servers:
        options = [option for check in checks or [] for option in ("--check", check)]
        trusting, tokens = authorised(servers) if name in AUTHORISED else ([], [])
        share = SHARE_OF_THE_BOUNDED if name in AUTHORISED else []
        chosen = {
            variant: [
                *with_store(command_of(), Path(folder), variant.rstrip("-"), memory),
                *server_args,
                *trusting,
                *(share if variant == "bounded-" else []),
            ]
            for variant, server_args in VARIANTS.items()
            if (variant.rstrip("-").replace("-", "_") or "main") in needed
        }
        if transport == "stdio":
            options += [
                o
                for variant, command in chosen.items()
                for o in (f"--{variant}command", subprocess.list2cmdline(command))
            ]
        else:
            urls = servers.enter_context(http_servers(list(chosen.values())))
            options += [o for variant, url in zip(chosen, urls, strict=True) for o in (f"--{variant}url", url)]
        report = Path(folder) / "checks.json"
        ran = subprocess.run(
            [sys.executable, str(KIT), *options, *extra, *tokens, "--timeout", f"{timeout:g}", "--json", str(report)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        if not report.exists():
            raise RuntimeError(f"the kit wrote no report for {name}:\n{ran.stdout}\n{ran.stderr}")
        return json.loads(report.read_text(encoding="utf-8")), ran.stdout + ran.stderr


FELL_SHORT = ("FAILURE", "WARNING")


def short_of(results: list[dict]) -> set[str]:
    """The checks that fell short: FAILURE or WARNING."""
    return {entry["id"].removeprefix("sep-3182-") for entry in results if entry["status"] in FELL_SHORT}


def problems_of(name: str, results: list[dict]) -> list[str]:
    """What is not as this project expects for one target or stand-in."""
    short = short_of(results)
    if name in STAND_INS:
        expected = STAND_INS[name][1]
        return ([f"{name}: also falls short on {sorted(short - expected)}"] if short - expected else []) + (
            [f"{name}: passes {sorted(expected - short)}, which its broken rule should fail"]
            if expected - short
            else []
        )
    allowed = {check.removeprefix("sep-3182-") for check in KNOWN_WARNINGS.get(name, {})}
    failures = {entry["id"] for entry in results if entry["status"] == "FAILURE"}
    return ([f"{name}: FAILURE of {sorted(failures)}"] if failures else []) + (
        [f"{name}: falls short on {sorted(short - allowed)}"] if short - allowed else []
    )


MARKS = {"SUCCESS": "pass", "FAILURE": "**FAIL**", "WARNING": "*warn*", "SKIPPED": "skip", "INFO": "info"}


def mark(entry: dict) -> str:
    """One check's result, as a cell: pass, **FAIL**, *warn*, skip, or n/a for a rule that does not bind."""
    return MARKS[entry["status"]] if kit.applicable(entry) else "n/a"


def table(runs: dict) -> str:
    """The results in markdown: a row per check and a column per server of ours; then a line per stand-in,
    naming the checks it falls short on, which must be exactly its broken rule's."""
    servers = [name for name in runs if name not in STAND_INS]
    ids = [entry["id"] for entry in next(iter(runs.values()))]
    lines = ["| check | " + " | ".join(TARGETS[name][0] for name in servers) + " |", "|---|" + "---|" * len(servers)]
    for check_id in ids:
        cells = [mark(next(e for e in runs[name] if e["id"] == check_id)) for name in servers]
        lines.append(f"| `{check_id}` | " + " | ".join(cells) + " |")
    stand_ins = [name for name in runs if name in STAND_INS]
    if stand_ins:
        lines += ["", "| stand-in | falls short on (FAIL or *warn*), and on nothing else |", "|---|---|"]
        for name in stand_ins:
            short = [
                f"`{e['id'].removeprefix('sep-3182-')}` {mark(e)}" for e in runs[name] if e["status"] in FELL_SHORT
            ]
            lines.append(f"| [{name}](../tests/stand_ins/{STAND_INS[name][0]}) | " + ", ".join(short) + " |")
    return "\n".join(lines) + "\n"


README = ROOT / "conformance" / "README.md"
TABLE_MARKS = ("<!-- results: tests/kit_targets.py --readme writes from here -->", "<!-- to here -->")


def with_table(doc: Path, marks: tuple[str, str], markdown: str) -> str:
    """The text of `doc` with `markdown` between its two `marks`, in place of what was there (for this
    script's results and for the other scripts that write a measured table into a document)."""
    text = doc.read_text(encoding="utf-8")
    start, end = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return f"{text[:start]}\n{markdown}{text[end:]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"targets and stand-ins (default: all): {', '.join(TARGETS)}"
    )
    parser.add_argument(
        "--readme", action="store_true", help="replace the results table in conformance/README.md with this run's"
    )
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
    if options.readme:
        summary = (
            f"This run: {time.strftime('%Y-%m-%d', time.gmtime())}, kit_targets "
            f"{'passed' if not problems else 'FAILED: ' + '; '.join(problems)}.\n\n{table(runs)}"
        )
        README.write_text(with_table(README, TABLE_MARKS, summary), encoding="utf-8")
    print()
    for problem in problems:
        print(problem)
    print(
        f"kit_targets: {len(runs) - len({p.split(':')[0] for p in problems})} passed, "
        f"{len({p.split(':')[0] for p in problems})} failed"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
