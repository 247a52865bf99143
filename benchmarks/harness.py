"""What every section of the benchmark shares: the report, the servers, the clients that time them, the stores.

Ratios are only ever taken between measurements made side by side in one run,
interleaved, by medians (p99 beside them), because the machine is shared and
absolute figures are noise; no time is ever asserted. A missed target is a finding;
a wrong answer (an error reply, a charge too many or too few) ends the run.
"""

import http.client
import json
import math
import os
import random
import sqlite3
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import anyio
from wire import (
    ABSENT,
    REPLY_TIMEOUT,
    SDK2_SERVER,
    SERVER,
    HttpWire,
    LegacyStdioWire,
    ModernStdioWire,
    Wire,
    free_port,
    sdk2_python,
    with_envelope,
)

from mcp_idempotency.rules import MAX_RECORDS, MAX_RECORDS_PER_PRINCIPAL  # the default bounds (P9, P9')

ROOT = Path(__file__).resolve().parent.parent
SEED = 3182  # any fixed seed: the same shuffles and payloads on every run and machine
INSTRUMENTS = Path(__file__).resolve().parent / "instruments"  # its sitecustomize, for the servers that need it

# ----------------------------------------------------------------------------
# The report, verdicts and correctness checks
# ----------------------------------------------------------------------------

REPORT: list[str] = []  # every line printed to stdout, for --write


def emit(line: str = "") -> None:
    """A line of the report: printed at once, and kept for --write."""
    print(line, flush=True)  # a long run shows each section as it finishes
    REPORT.append(line)


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile by nearest rank (q=50 is the median); no interpolation to explain."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def verdict(met: bool) -> str:
    """How a target reads in the table."""
    return "MET" if met else "MISSED"


def fail(failure: str) -> NoReturn:
    """End the run on a wrong answer, which unlike a missed target is a failure."""
    raise SystemExit(f"bench.py: FAILED: {failure}")


def check(ok: bool, failure: str) -> None:
    """A correctness check: fail unless `ok`."""
    if not ok:
        fail(failure)


def succeeded(response: dict) -> None:
    """The response is a tool result, not a JSON-RPC error nor a failed tool call."""
    check("result" in response and not response["result"].get("isError"), f"a call failed: {response}")


def print_table(heading: str, columns: list[str], rows: list[list], note: str = "") -> None:
    """One section of the report: a markdown table under its heading, and a paragraph below it."""
    emit(f"\n## {heading}\n")
    emit("| " + " | ".join(columns) + " |")
    emit("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        emit("| " + " | ".join(str(cell) for cell in row) + " |")
    if note:
        emit(f"\n{note}")


def progress(message: str) -> None:
    """A diagnostic line on stderr, so stdout carries the tables alone."""
    print(f"bench.py: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# Servers, started quiet, and the clients that time them
# ----------------------------------------------------------------------------


def launch(
    target: str,
    *server_args: str,
    verbose: bool = False,
    server: Path | None = None,
    headers: dict | None = None,
    instruments: dict[str, str] | None = None,
) -> Wire:
    """tests/wire.py's start(), but quiet unless `verbose`; a 2.x server is given its --store by the caller,
    over HTTP `headers` (a bearer token) with every message, and with `instruments` (SEP3182_BENCH_* variables)
    benchmarks/instruments/sitecustomize.py."""
    flags = ["--verbose"] if verbose else []
    # The bench runs with tests/ and the project on PYTHONPATH; a server runs as a user starts it, without them.
    environment = ["env", "-u", "PYTHONPATH"]
    if instruments:
        environment += [f"PYTHONPATH={INSTRUMENTS}", *(f"{name}={value}" for name, value in instruments.items())]
    if target == "1x-stdio":
        return LegacyStdioWire(target, [*environment, sys.executable, str(server or SERVER), *flags, *server_args])
    placement = ["--placement", "params"]  # where tests/wire.py sends keys (the default is _meta)
    command = [*environment, sdk2_python(), *SDK2_SERVER, *flags, *placement, *server_args]
    if target == "2x-stdio":
        return ModernStdioWire(target, command)
    port = free_port()
    return HttpWire(target, [*command, "--transport", "http", "--port", str(port)], port, headers=headers)


def launch_all(*specs: tuple[tuple, dict]) -> list[Wire]:
    """Start several servers, each spec (args, kwargs) for launch(), as many at a time as there are cores."""
    # Each takes a second or two of CPU to import its SDK: more at once than there are
    # cores, and the last may not listen within the wire's timeout.
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        futures = [pool.submit(launch, *args, **kwargs) for args, kwargs in specs]
    wires = [future.result() for future in futures if future.exception() is None]
    failed = [future.exception() for future in futures if future.exception() is not None]
    if failed:
        close_all(wires)
        raise failed[0]
    return wires


def room_for(records: int) -> tuple[str, ...]:
    """--max-records if a measurement stores more records than the servers' default bound admits, else nothing."""
    # The bound costs nothing below it, so the default counts leave it alone:
    # only counts scaled up past it would otherwise meet idempotency_store_full.
    return () if records <= MAX_RECORDS else ("--max-records", str(records))


def share_for(records: int) -> tuple[str, ...]:
    """--max-records-per-principal if one principal stores more records than the 2.x server's default share
    (P9') admits, else nothing: every measurement here calls as one principal, and must never meet its share."""
    return () if records <= MAX_RECORDS_PER_PRINCIPAL else ("--max-records-per-principal", str(records))


def close_all(wires: list[Wire]) -> None:
    """Stop every server; each has been spoken to, so each is closed the way its transport ends."""
    for wire in wires:
        wire.close()


class StdioCaller:
    """Charges over the wire's stdio pipes, one at a time."""

    def __init__(self, wire: Wire):
        self.wire = wire

    def call(self, tool: str, key=ABSENT) -> str:
        """One charge of 1 with `key` (or none); its response line as the server wrote it."""
        return self.wire.raw_reply(self.wire.send_call(tool, {"amount": 1}, key))

    def close(self) -> None:
        pass


# What sending on a kept-alive connection the server has closed meanwhile raises.
STALE_CONNECTION = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class HttpCaller:
    """Charges over one kept-alive HTTP connection to a 2.x server, as the SDK's own client (httpx) sends them."""

    def __init__(self, wire: HttpWire):
        self.wire = wire
        self.connection = http.client.HTTPConnection("127.0.0.1", wire.port, timeout=REPLY_TIMEOUT)
        self.next_id = 0

    def call(self, tool: str, key=ABSENT) -> str:
        """One charge of 1 with `key` (or none); the response body as the server wrote it."""
        self.next_id += 1
        params = {"name": tool, "arguments": {"amount": 1}}
        if key is not ABSENT:
            params["idempotencyKey"] = key
        message = with_envelope({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params})
        body, headers = json.dumps(message).encode(), self.wire.headers(message)
        try:
            self.connection.request("POST", "/mcp", body, headers)
            return self.connection.getresponse().read().decode()
        except STALE_CONNECTION:
            # The server closed the connection while it sat idle (uvicorn keeps one alive 5 s),
            # so the request never reached it: sent again on a new one, as httpx does.
            self.connection.close()
            self.connection.request("POST", "/mcp", body, headers)
            return self.connection.getresponse().read().decode()

    def close(self) -> None:
        self.connection.close()


def caller_for(wire: Wire) -> StdioCaller | HttpCaller:
    """The leanest client for the wire's transport."""
    return HttpCaller(wire) if isinstance(wire, HttpWire) else StdioCaller(wire)


# ----------------------------------------------------------------------------
# Round trips (sections 1, 5, 6 and 7): three kinds of call, interleaved
# ----------------------------------------------------------------------------

UNKEYED, FRESH, REPLAY = "no key (charge_unguarded)", "fresh key, executes", "replay of a finished key"
KINDS = (UNKEYED, FRESH, REPLAY)
WARMUP_ROUNDS = 100  # the first calls pay for lazy imports, first validations and cold caches;
# never more warm-up than measured rounds, so that a smoke test on tiny counts stays quick
ROUND_TRIP_COLUMNS = ["server", "call", "median µs", "p99 µs", "median / unkeyed", "target", ""]


@dataclass
class Subject:
    """One server under a round-trip measurement, and what was measured on it."""

    label: str
    wire: Wire
    keyed_target: float
    replay_target: float
    caller: StdioCaller | HttpCaller = field(init=False)
    keys: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=lambda: {kind: [] for kind in KINDS})

    def __post_init__(self):
        self.caller = caller_for(self.wire)

    def median(self, kind: str) -> float:
        return percentile(self.samples[kind], 50)


def timed_call(subject: Subject, tool: str, key=ABSENT) -> int:
    """Nanoseconds from writing one charge's request to reading its response."""
    # The message is serialised inside the timing: a few microseconds, the same
    # for every kind, against a round trip of a millisecond or more.
    start = time.perf_counter_ns()
    text = subject.caller.call(tool, key)
    elapsed = time.perf_counter_ns() - start
    succeeded(json.loads(text))
    return elapsed


def one_round(subject: Subject, rng: random.Random, keep: bool) -> None:
    """One call of each kind, in a shuffled order so that noise hits every kind alike."""
    for kind in rng.sample(KINDS, k=len(KINDS)):
        if kind == FRESH:
            subject.keys.append(str(uuid.uuid4()))
        # A replay repeats the newest key, whose call has already answered: finished.
        tool, key = ("charge_unguarded", ABSENT) if kind == UNKEYED else ("charge_guarded", subject.keys[-1])
        latency = timed_call(subject, tool, key)
        if keep:
            subject.samples[kind].append(latency / 1000)


def round_trips(subjects: list[Subject], calls: int) -> None:
    """Warm up, then `calls` rounds; each round visits every subject, in a shuffled order, for one call of each kind."""
    rng, warmup = random.Random(SEED), min(WARMUP_ROUNDS, calls)
    for subject in subjects:
        subject.keys.append(str(uuid.uuid4()))
        timed_call(subject, "charge_guarded", subject.keys[0])  # the first replay needs a finished key
    for number in range(warmup + calls):
        for subject in rng.sample(subjects, k=len(subjects)):
            one_round(subject, rng, keep=number >= warmup)
    # The timings mean something only if every fresh key ran once and no replay ran.
    for subject in subjects:
        subject.caller.close()
        executed, ledger = 1 + 2 * (warmup + calls), subject.wire.ledger()
        check(ledger["charges"] == executed, f"{subject.label}: expected {executed} charges, the ledger says {ledger}")


def records_after(calls: int) -> int:
    """How many records round_trips() leaves in a store: one per fresh key, warm-up included."""
    return 1 + min(WARMUP_ROUNDS, calls) + calls


def round_trip_rows(subject: Subject) -> list[list]:
    """The subject's three rows: median, p99, the ratio of medians to the unkeyed call, and its verdict."""
    unkeyed, rows = subject.median(UNKEYED), []
    for kind, target in ((UNKEYED, None), (FRESH, subject.keyed_target), (REPLAY, subject.replay_target)):
        ratio = subject.median(kind) / unkeyed
        judged = ["", ""] if target is None else [f"<= {target:.2f}", verdict(ratio <= target)]
        rows.append(
            [
                subject.label,
                kind,
                f"{subject.median(kind):.0f}",
                f"{percentile(subject.samples[kind], 99):.0f}",
                f"{ratio:.3f}",
                *judged,
            ]
        )
    return rows


# ----------------------------------------------------------------------------
# The stores: PostgreSQL databases of the bench's own, SQLite files
# ----------------------------------------------------------------------------


class Postgres:
    """The PostgreSQL server the bench may use: databases of its own on it, or why there is none."""

    def __init__(self, url: str | None):
        self.admin_url, self.version, self.missing = url, None, None
        self.names: list[str] = []  # the bench's own databases, while they exist
        if not url:
            self.missing = "no PostgreSQL: pass --postgres URL or set SEP3182_POSTGRES"
            return
        try:
            self.version = anyio.run(self._fetch, self.admin_url, "SHOW server_version")
        except Exception as error:  # no asyncpg, nothing listening, bad credentials
            # The URL is not repeated: it may carry a password, and this line goes into RESULTS.md.
            self.missing = f"no PostgreSQL: connecting failed with {type(error).__name__}: {error}".rstrip(": ")

    @staticmethod
    async def _fetch(url: str, query: str, *more: str):
        """The first value of `query` on a new connection to `url`, after running `more` first."""
        import asyncpg  # only the PostgreSQL rows need it (tests/requirements.txt has it)

        connection = await asyncpg.connect(url)
        try:
            for statement in more:
                await connection.execute(statement)
            return await connection.fetchval(query)
        finally:
            await connection.close()

    def create(self) -> str:
        """A new, empty database on the server, dropped by drop(); its URL."""
        self.names.append(f"bench_{uuid.uuid4().hex[:12]}")
        anyio.run(self._fetch, self.admin_url, "SELECT 1", f"CREATE DATABASE {self.names[-1]}")
        return self.admin_url.rsplit("/", 1)[0] + "/" + self.names[-1]

    def drop(self) -> None:
        """Drop every database create() made."""
        while self.names:
            anyio.run(self._fetch, self.admin_url, "SELECT 1", f"DROP DATABASE {self.names.pop()} WITH (FORCE)")

    def size(self, url: str, vacuum: bool = False) -> tuple[int, int, int]:
        """Bytes of the records table (indexes, TOAST), its rows and their outcomes' bytes; VACUUM FULL first if so."""
        query = (
            "SELECT concat_ws(' ', pg_total_relation_size('idempotency_records'), count(*), "
            "coalesce(sum(octet_length(outcome)), 0)) FROM idempotency_records"
        )
        before = ["VACUUM FULL idempotency_records"] if vacuum else []
        size, rows, outcomes = anyio.run(self._fetch, url, query, *before).split()
        return int(size), int(rows), int(outcomes)


def sqlite_size(path: Path, vacuum: bool = False) -> tuple[int, int, int]:
    """Bytes of the database (the WAL's pages too), the records and their outcomes' bytes; VACUUM first if asked."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout = 10000")
        if vacuum:
            db.execute("VACUUM")
        pages, page_size = db.execute("PRAGMA page_count").fetchone()[0], db.execute("PRAGMA page_size").fetchone()[0]
        rows, outcomes = db.execute(
            "SELECT count(*), coalesce(sum(length(CAST(outcome AS BLOB))), 0) FROM idempotency_records"
        ).fetchone()
        return pages * page_size, rows, outcomes
    finally:
        db.close()


STORES = ("memory", "SQLite", "PostgreSQL")


def new_store(label: str, folder: Path, postgres: Postgres) -> str:
    """A new, empty store of the kind `label` names: memory, a SQLite file in `folder`, or a PostgreSQL database."""
    if label == "memory":
        return "memory"
    return f"sqlite:{folder / uuid.uuid4().hex}.db" if label == "SQLite" else postgres.create()


def measured_stores(postgres: Postgres) -> list[str]:
    """The stores a run can measure: PostgreSQL only with a server."""
    return [label for label in STORES if label != "PostgreSQL" or postgres.missing is None]
