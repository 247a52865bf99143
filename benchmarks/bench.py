"""What an idempotencyKey costs both servers, in six measurements.

    .venv/bin/python benchmarks/bench.py [--calls N] [--repeats N] [--records N] [--in-flight N]
        [--clients N] [--scale-calls N] [--postgres URL] [--sections 123456] [--server PATH] [--write PATH]

    e.g. .venv/bin/python benchmarks/bench.py --write benchmarks/RESULTS.md   (about 12 minutes on 2 shared cores)

It runs with the mcp 1.x environment (.venv) and starts the mcp 2.x server with
.venv-2x (or $SEP3182_SDK2_PYTHON), as tests/wire.py does.

1. round trip, per target (1x-stdio, 2x-stdio, 2x-http): a call without a key, a
   keyed call that executes and a keyed replay, against the servers as a user runs
   them (quiet; the 2.x server on its memory store, like the 1.x one's dicts) and,
   interleaved with them, the same servers with --verbose, as the demos run them;
2. the fingerprint (P3) against each SDK's own parse of the same tools/call line,
   as the arguments grow, timed within each SDK's interpreter
   (benchmarks/fingerprint_timing.py);
3. the memory one record takes in the 1.x server's store, and whether expiry
   gives it all back;
4. 1,000 calls in flight at once on the 1.x server over stdio: exactly one charge
   each, and the throughput with distinct keys against none;
5. the shared stores of the 2.x server over HTTP, SQLite and PostgreSQL: the
   round trip of section 1 against a call without a key that writes the same
   ledger, the bytes one record takes in each store, and the calls per second of
   four instances on one store against one instance;
6. authorisation: the round trip of section 1 on the 2.x server over HTTP, on the
   memory, SQLite and PostgreSQL stores, each measured without authorisation and,
   interleaved with it, as an OAuth resource server (--issuer, the real issuer of
   sdk2/issuer.py, a bearer token on every call): keyed over unkeyed in both, and
   what the token's check adds to every request, keyed or not.

Every target is printed with MET or MISSED. A missed target is a finding, so it
never fails the run; a wrong answer (an error reply, a charge too many or too
few, a record too many or too few) does, with a non-zero exit. The tables go to
stdout (and with --write to a file, under a header naming the machine and the
SDKs), progress to stderr. Ratios are only ever taken between measurements made
side by side in one run, interleaved, by medians (p99 beside them), because the
machine is shared and absolute figures are noise; no time is ever asserted.

The servers are started with tests/wire.py's Wire classes, but quiet unless a
configuration says --verbose: wire.start() always passes --verbose, which the
tests need for their log assertions and a user's server does not have. Over HTTP
the timed calls use one kept-alive connection per client, as the SDK's own
client (httpx) does, rather than the wire's fresh connection and thread per
message, so that less of each figure is the harness. Sections 5 and 6 need a
PostgreSQL server for their PostgreSQL rows (--postgres, default $SEP3182_POSTGRES):
they make databases of their own there and drop them afterwards; without one those
rows say "not measured".
"""

import argparse
import functools
import gc
import http.client
import importlib.util
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Callable, NoReturn

import anyio
import mcp.types as types
from mcp.shared.exceptions import McpError
from mcp.shared.memory import create_connected_server_and_client_session

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "sdk2"), str(ROOT / "tests")]
import sep3182  # noqa: E402
from client_demo import call_tool  # noqa: E402
from oauth import RESOURCE, Issuer, bearer  # noqa: E402
from wire import (  # noqa: E402
    ABSENT, REPLY_TIMEOUT, SDK2_SERVER, SERVER, TARGETS, HttpWire, LegacyStdioWire, ModernStdioWire, Wire,
    free_port, sdk2_python, with_envelope,
)

SEED = 3182  # any fixed seed: the same shuffles and payloads on every run and machine
FINGERPRINT_TIMING = Path(__file__).resolve().parent / "fingerprint_timing.py"

# ----------------------------------------------------------------------------
# Shared helpers: statistics, verdicts, correctness checks, the report
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


def launch(target: str, *server_args: str, verbose: bool = False, server: Path | None = None,
           headers: dict | None = None) -> Wire:
    """tests/wire.py's start(), but quiet unless `verbose`; a 2.x server is given its --store by the caller,
    and over HTTP `headers` (a bearer token) with every message."""
    flags = ["--verbose"] if verbose else []
    if target == "1x-stdio":
        return LegacyStdioWire(target, [sys.executable, str(server or SERVER), *flags, *server_args])
    command = [sdk2_python(), str(SDK2_SERVER), *flags, *server_args]
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


MAX_RECORDS = sep3182.MAX_RECORDS  # both servers' default bound on live records (P9)


def room_for(records: int) -> tuple[str, ...]:
    """--max-records if a measurement stores more records than the servers' default bound admits, else nothing."""
    # The bound costs nothing below it, so the default counts leave it alone:
    # only counts scaled up past it would otherwise meet idempotency_store_full.
    return () if records <= MAX_RECORDS else ("--max-records", str(records))


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
        self.connection.request("POST", "/mcp", json.dumps(message).encode(), self.wire.headers(message))
        return self.connection.getresponse().read().decode()

    def close(self) -> None:
        self.connection.close()


def caller_for(wire: Wire) -> StdioCaller | HttpCaller:
    """The leanest client for the wire's transport."""
    return HttpCaller(wire) if isinstance(wire, HttpWire) else StdioCaller(wire)


# ----------------------------------------------------------------------------
# Round trips (sections 1 and 5): three kinds of call, interleaved
# ----------------------------------------------------------------------------

UNKEYED, FRESH, REPLAY = "no key (charge_unguarded)", "fresh key, executes", "replay of a finished key"
KINDS = (UNKEYED, FRESH, REPLAY)
WARMUP_ROUNDS = 100  # the first calls pay for lazy imports, first validations and cold caches;
# never more warm-up than measured rounds, so that a smoke test on tiny counts stays quick


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


def round_trip_rows(subject: Subject) -> list[list]:
    """The subject's three rows: median, p99, the ratio of medians to the unkeyed call, and its verdict."""
    unkeyed, rows = percentile(subject.samples[UNKEYED], 50), []
    for kind, target in ((UNKEYED, None), (FRESH, subject.keyed_target), (REPLAY, subject.replay_target)):
        median = percentile(subject.samples[kind], 50)
        ratio = median / unkeyed
        judged = ["", ""] if target is None else [f"<= {target:.2f}", verdict(ratio <= target)]
        rows.append([subject.label, kind, f"{median:.0f}", f"{percentile(subject.samples[kind], 99):.0f}",
                     f"{ratio:.3f}", *judged])
    return rows


ROUND_TRIP_COLUMNS = ["server", "call", "median µs", "p99 µs", "median / unkeyed", "target", ""]

# ----------------------------------------------------------------------------
# 1. Round trip per target
# ----------------------------------------------------------------------------

KEYED_TARGET = 1.05  # a key may cost at most 5% on a call that runs the tool
REPLAY_TARGET = 1.00  # a replay skips the tool, so it must not be slower than running it


def target_args(target: str, calls: int) -> tuple[str, ...]:
    """Section 1's conditions: the 2.x server on its memory store, as the 1.x server keeps its dicts."""
    room = room_for(1 + min(WARMUP_ROUNDS, calls) + calls)
    return room if target == "1x-stdio" else ("--store", "memory", *room)


def round_trip(server_path: Path, calls: int) -> None:
    """Section 1: every target, quiet and --verbose, six servers measured in one interleaved loop."""
    progress(f"1. round trip: 6 servers, {min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls")
    configurations = [(target, verbose) for verbose in (False, True) for target in TARGETS]
    wires = launch_all(*[((target, *target_args(target, calls)), {"verbose": verbose, "server": server_path})
                         for target, verbose in configurations])
    try:
        subjects = [Subject(target, wire, KEYED_TARGET, REPLAY_TARGET)
                    for (target, _), wire in zip(configurations, wires)]
        round_trips(subjects, calls)
    finally:
        close_all(wires)
    records = len(subjects[0].keys)
    for verbose, (suffix, heading) in ((False, ("a", "as a user runs the servers: quiet, the default")),
                                       (True, ("b", "with --verbose: the decision log on, as the demos run it"))):
        rows = [row for subject, (_, v) in zip(subjects, configurations) if v == verbose
                for row in round_trip_rows(subject)]
        print_table(f"1{suffix}. Round trip per target, {heading} ({calls} calls of each kind, interleaved)",
                    ROUND_TRIP_COLUMNS, rows,
                    f"All six servers (1a and 1b) were measured in one loop, interleaved call by call. "
                    f"The 2.x servers ran with --store memory. Each store held {records} records at the end: "
                    f"one per fresh key, warm-up included." if verbose else "")


# ----------------------------------------------------------------------------
# 2. Fingerprint cost against argument size
# ----------------------------------------------------------------------------

SIZES = {"1 KiB": 1 << 10, "64 KiB": 1 << 16, "1 MiB": 1 << 20}
FINGERPRINT_TARGET = 0.5  # the key's own work at most half of what the SDK already does per request
# Linear work keeps ns/byte flat, but the objects parsed from 1 MiB of JSON are
# tens of MB and spill out of the CPU caches where 64 KiB's fit: that step alone
# can double the cost per byte. Super-linear work shows above it: n^1.5 would
# multiply ns/byte by 4 over this 16-fold growth, n^2 by 16.
LINEAR_TARGET = 2.0
WORDS = ["red", "green", "blue", "sale", "new", "gift", "bulk", "fragile", "café", "naïve"]


def basket_item(rng: random.Random) -> dict:
    """One line of a basket: nested objects and arrays, floats (some whole: P3 turns them to ints), strings."""
    return {
        "sku": f"SKU-{rng.randrange(10**8):08d}",
        "name": " ".join(rng.choices(WORDS, k=rng.randrange(1, 5))),
        "price": round(rng.uniform(0.5, 500), 2),
        "quantity": float(rng.randrange(1, 20)),
        "tags": rng.choices(WORDS, k=rng.randrange(0, 4)),
        "size": {"width": rng.random(), "height": rng.random(), "unit": "cm"},
    }


def arguments_of_size(size: int) -> dict:
    """Seeded tools/call arguments whose compact JSON is about `size` bytes."""
    rng = random.Random(SEED)
    basket, length = [], 0
    while length < size:
        basket.append(basket_item(rng))
        length += len(json.dumps(basket[-1], separators=(",", ":"))) + 1
    return {"amount": 100, "basket": basket}


def sdk_timings(python: str, lines: list[str], repeats: int) -> tuple[str, list[dict]]:
    """Run fingerprint_timing.py with `python` (one SDK's interpreter) on `lines`; its SDK and raw samples."""
    run = subprocess.run([python, str(FINGERPRINT_TIMING)], input=json.dumps({"repeats": repeats, "lines": lines}),
                         capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        raise RuntimeError(f"{FINGERPRINT_TIMING.name} failed under {python}:\n{run.stderr}")
    answer = json.loads(run.stdout)
    return answer["sdk"], answer["timings"]


def fingerprint_cost(repeats: int) -> None:
    """Section 2: the fingerprint against each SDK's parse, per size, and its ns per byte."""
    progress(f"2. fingerprint: {repeats} repetitions at each of {', '.join(SIZES)}, under each SDK")
    messages, lengths = [], []
    for size in SIZES.values():
        arguments = arguments_of_size(size)
        messages.append({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "charge_guarded", "arguments": arguments, "idempotencyKey": str(uuid.UUID(int=SEED))}})
        lengths.append(len(json.dumps(arguments, separators=(",", ":")).encode()))
    # The same tools/call, on each SDK's revision: 2025-03-26 for 1.x, 2026-07-28 (its _meta envelope) for 2.x.
    runs = [(sys.executable, [json.dumps(message) for message in messages]),
            (sdk2_python(), [json.dumps(with_envelope(message)) for message in messages])]
    rows, notes = [], []
    for python, lines in runs:
        sdk, timings = sdk_timings(python, lines, repeats)
        ns_per_byte = {}
        for label, length, samples in zip(SIZES, lengths, timings):
            fingerprint, parse = percentile(samples["fingerprint"], 50), percentile(samples["parse"], 50)
            ns_per_byte[label] = fingerprint / length
            rows.append([sdk, label, length, f"{fingerprint / 1000:.1f}", f"{parse / 1000:.1f}",
                         f"{fingerprint / parse:.2f}", f"<= {FINGERPRINT_TARGET}",
                         verdict(fingerprint / parse <= FINGERPRINT_TARGET), f"{ns_per_byte[label]:.1f}"])
        growth = ns_per_byte["1 MiB"] / ns_per_byte["64 KiB"]
        notes.append(f"{sdk}: ns/byte x{growth:.2f} (target <= {LINEAR_TARGET}, linear): "
                     f"{verdict(growth <= LINEAR_TARGET)}.")
    print_table(f"2. Fingerprint cost against argument size (medians of {repeats} interleaved repetitions, "
                f"each SDK in its own interpreter)",
                ["SDK", "arguments", "JSON bytes", "fingerprint µs", "SDK parse µs", "fingerprint / SDK", "target",
                 "", "fingerprint ns/byte"], rows,
                "SDK parse: mcp 1.x validates the line as a JSONRPCMessage, then a dump of it as a ClientRequest "
                "(its stdio server and session); mcp 2.x validates it with jsonrpc_message_adapter.validate_json "
                "(its stdio server), params left a plain dict. Growth of the fingerprint's ns/byte from 64 KiB "
                "to 1 MiB: " + " ".join(notes))


# ----------------------------------------------------------------------------
# 3. Memory
# ----------------------------------------------------------------------------

RECORD_TARGET = 2048  # bytes: 10,000 records (P9's bound) then cost at most 20 MiB
# Bytes above the baseline that still count as back to it: interpreter caches
# warmed by the run and a few free-list blocks, far below one byte per record.
RESIDUE_TARGET = 4096
# First calls build validators and fill SDK caches that would pass for records: mcp
# 1.30 checks every call with jsonschema, whose reference caches keep growing for a
# few hundred calls (16 KB left "after expiry" with 100 warm-up calls, 2.5 KB with 1,000).
# Never more than the records measured, so that a smoke test stays quick.
WARMUP_CALLS = 1000


async def call(session, tool: str, arguments: dict, key: str | None = None) -> types.CallToolResult:
    """One tools/call through the SDK's in-memory session, checked to have succeeded."""
    try:
        result = await call_tool(session, tool, arguments, key, timeout=REPLY_TIMEOUT)
    except McpError as error:
        fail(f"{tool} answered a JSON-RPC error: {error.error}")
    check(not result.isError, f"{tool} failed: {result}")
    return result


def traced_bytes() -> int:
    """The bytes Python holds now, garbage collected first so only live objects count."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def store_memory(server, records: int) -> tuple[float, int]:
    """Bytes per stored record, and the bytes left above the baseline once all have expired."""
    # The real dispatch path, through the SDK's in-memory session: a session
    # drops each request's state (its response stream, its in-flight entry) when
    # the call returns, so what stays between the two totals is the store; and
    # anything a session did keep would show in the residue after expiry.
    server.clock = lambda: 0.0  # a fake clock: every record completes at t=0
    tracemalloc.start()  # before the warm-up, so the blocks it frees are traced when reused
    try:
        async with create_connected_server_and_client_session(server.server) as session:
            for _ in range(min(WARMUP_CALLS, records)):
                await call(session, "charge_guarded", {"amount": 1}, str(uuid.uuid4()))
            await call(session, "get_balance", {})  # called once below: its validator is built here
            await call(session, "reset_ledger", {})  # the ledger; the warm-up's records stay (R1)...
            server._dedup_store = {}  # ...so they go here: the baseline is a fresh, empty store
            server.max_records = records  # room for every record, now that the store is empty
            baseline = traced_bytes()
            for _ in range(records):
                await call(session, "charge_guarded", {"amount": 1}, str(uuid.uuid4()))
            stored = traced_bytes()
            completed = sum(record.outcome is not None for record in server._dedup_store.values())
            check(completed == len(server._dedup_store) == records,
                  f"expected {records} completed records, the store holds {len(server._dedup_store)}, "
                  f"{completed} of them completed")
            charges = json.loads((await call(session, "get_balance", {})).content[0].text)["charges"]
            check(charges == records, f"expected {records} charges, the ledger says {charges}")
            server.clock = lambda: server.retention + 1  # one second past every window
            server.forget_expired()
            check(not server._dedup_store, f"{len(server._dedup_store)} records outlived their window")
            expired = traced_bytes()
            # An emptied dict keeps the table it grew to until a later insert resizes it:
            # that is the store's, not a record's, and the rest must be back to the baseline.
            table = sys.getsizeof(server._dedup_store)
    finally:
        tracemalloc.stop()
    return (stored - baseline) / records, table, expired - baseline - table


def load_server(path: Path):
    """Import the 1.x server script as a module: it builds its FastMCP object, it does not serve."""
    spec = importlib.util.spec_from_file_location("server_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def memory(server_path: Path, records: int) -> None:
    """Section 3: what the 1.x store holds per record, and what expiry gives back."""
    progress(f"3. memory: {records} keyed calls through the in-memory session, under tracemalloc")
    per_record, table, residue = anyio.run(store_memory, load_server(server_path), records)
    print_table(f"3. Memory of the 1.x store (tracemalloc, in process, {records} records of the demo's real results)",
                ["measure", "bytes", "target", ""],
                [["per stored record", f"{per_record:.0f}", f"<= {RECORD_TARGET}",
                  verdict(per_record <= RECORD_TARGET)],
                 ["after expiry: the emptied dict's table, until a later insert resizes it", f"{table}", "", ""],
                 ["after expiry: everything else left above the baseline", f"{residue}", f"<= {RESIDUE_TARGET}",
                  verdict(residue <= RESIDUE_TARGET)]])


# ----------------------------------------------------------------------------
# 4. Concurrency
# ----------------------------------------------------------------------------

ROUNDS = 7  # batches of each kind, alternated: on two shared cores one burst in three was 10% off
THROUGHPUT_TARGET = 0.95  # section 1's 5%, with every call in flight at once


def burst(wire: Wire, keyed: bool, count: int) -> float:
    """`count` charges in flight at once: write every request, then read every response; calls/s."""
    wire.call("reset_ledger", {})
    tool = "charge_guarded" if keyed else "charge_unguarded"
    keys = [str(uuid.uuid4()) if keyed else ABSENT for _ in range(count)]
    start = time.perf_counter()
    ids = [wire.send_call(tool, {"amount": 1}, key) for key in keys]
    responses = [wire.reply(request_id) for request_id in ids]
    elapsed = time.perf_counter() - start
    for response in responses:
        succeeded(response)
    charges = wire.ledger()["charges"]
    check(charges == count, f"{count} {'keyed' if keyed else 'unkeyed'} calls in flight made {charges} charges")
    return count / elapsed


def concurrency(server_path: Path, count: int) -> None:
    """Section 4: exactly one charge per distinct key under load, and the throughput against no keys."""
    progress(f"4. concurrency: a warm-up and {ROUNDS} rounds of {count} calls in flight, keyed and unkeyed")
    wire = launch("1x-stdio", *room_for((1 + ROUNDS) * count), server=server_path)
    try:
        for keyed in (False, True):  # warm-up: the first bursts meet a cold server
            burst(wire, keyed, count)
        throughput = {False: [], True: []}
        for _ in range(ROUNDS):
            for keyed in (False, True):
                throughput[keyed].append(burst(wire, keyed, count))
    finally:
        wire.close()
    unkeyed, keyed = percentile(throughput[False], 50), percentile(throughput[True], 50)
    print_table(f"4. Concurrency over stdio on the 1.x server, quiet ({count} calls in flight at once, "
                f"median of {ROUNDS} alternated rounds)",
                ["calls", "calls/s", "charges per burst", "target", ""],
                [["no key", f"{unkeyed:.0f}", count, f"== {count}", "MET"],
                 ["distinct keys", f"{keyed:.0f}", count, f"== {count}", "MET"],
                 ["keyed / unkeyed throughput", f"{keyed / unkeyed:.3f}", "", f">= {THROUGHPUT_TARGET}",
                  verdict(keyed / unkeyed >= THROUGHPUT_TARGET)]],
                "A wrong charge count fails the run: every burst above charged exactly once per call.")


# ----------------------------------------------------------------------------
# 5. The shared stores over HTTP
# ----------------------------------------------------------------------------

STORE_KEYED_TARGET = {"SQLite": 1.10, "PostgreSQL": 1.25}  # a store's claim and record, on top of its ledger write
STORE_REPLAY_TARGET = 0.80  # a replay skips the tool and its ledger write
INSTANCES = 4


class Postgres:
    """The PostgreSQL server section 5 may use: a database of the bench's own on it, or why there is none."""

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
        import asyncpg  # only section 5 needs it (tests/requirements.txt has it)

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
        query = ("SELECT concat_ws(' ', pg_total_relation_size('idempotency_records'), count(*), "
                 "coalesce(sum(octet_length(outcome)), 0)) FROM idempotency_records")
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
        rows, outcomes = db.execute("SELECT count(*), coalesce(sum(length(CAST(outcome AS BLOB))), 0) "
                                    "FROM idempotency_records").fetchone()
        return pages * page_size, rows, outcomes
    finally:
        db.close()


@dataclass
class Store:
    """A shared store and the instances of the 2.x server that share it."""

    label: str
    url: str
    size: Callable[..., tuple[int, int, int]]  # size(vacuum=False): bytes, records, bytes of their outcomes
    wires: list[HttpWire] = field(default_factory=list)
    subject: Subject | None = None  # its round trip, on its first instance
    sizes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    throughput: dict[int, list[float]] = field(default_factory=dict)


def spread_calls(wires: list[HttpWire], clients: int, calls: int) -> float:
    """`calls` fresh keyed charges from `clients` threads, each taking the instances in turn; calls/s."""
    wires[0].call("reset_ledger", {})
    go, failures = threading.Event(), []
    responses: list[list[str]] = [[] for _ in range(clients)]

    def client(index: int) -> None:
        callers = [HttpCaller(wire) for wire in wires]
        keys = [str(uuid.uuid4()) for _ in range(calls // clients)]
        go.wait()
        try:
            for number, key in enumerate(keys):
                responses[index].append(callers[(index + number) % len(callers)].call("charge_guarded", key))
        except Exception as error:  # checked below, on the main thread
            failures.append(error)
        finally:
            for caller in callers:
                caller.close()

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    check(not failures, f"a client failed: {failures[:1]}")
    for text in (text for answers in responses for text in answers):
        succeeded(json.loads(text))
    made = clients * (calls // clients)
    charges = wires[0].ledger()["charges"]
    check(charges == made, f"{made} keyed calls over {len(wires)} instances made {charges} charges")
    return made / elapsed


def shared_stores(calls: int, clients: int, scale_calls: int, postgres: Postgres) -> None:
    """Section 5: round trip, bytes per record and instances on one store, for SQLite and PostgreSQL."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    stores = [Store("SQLite", f"sqlite:{folder / 'store.db'}", functools.partial(sqlite_size, folder / "store.db"))]
    try:
        if postgres.missing is None:
            url = postgres.create()
            stores.append(Store("PostgreSQL", url, functools.partial(postgres.size, url)))
        progress(f"5. shared stores: {INSTANCES} instances on each of {', '.join(s.label for s in stores)}")
        room = room_for(1 + min(WARMUP_ROUNDS, calls) + calls + (1 + ROUNDS) * 2 * scale_calls)
        wires = launch_all(*[(("2x-http", "--store", store.url, *room), {})
                             for store in stores for _ in range(INSTANCES)])
        for number, store in enumerate(stores):
            store.wires = wires[number * INSTANCES:(number + 1) * INSTANCES]
        try:
            measure_stores(stores, calls, clients, scale_calls)
        finally:
            close_all(wires)
    finally:
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    report_stores(stores, postgres, calls, clients, scale_calls)


def measure_stores(stores: list[Store], calls: int, clients: int, scale_calls: int) -> None:
    """Every measurement of section 5, each store's interleaved with the others'."""
    for store in stores:
        store.sizes["empty"] = store.size()
    progress(f"5. round trip: {min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls on each store")
    subjects = [Subject(store.label, store.wires[0], STORE_KEYED_TARGET[store.label], STORE_REPLAY_TARGET)
                for store in stores]
    round_trips(subjects, calls)
    for store, subject in zip(stores, subjects):
        store.subject = subject
        store.sizes["before"] = store.size()
    progress(f"5. instances: a warm-up and {ROUNDS} rounds of {scale_calls} keyed calls from {clients} threads "
             f"on 1 and on {INSTANCES} instances of each store")
    made = 0
    for number in range(1 + ROUNDS):
        for store in stores:
            for instances in (1, INSTANCES):
                throughput = spread_calls(store.wires[:instances], clients, scale_calls)
                if number > 0:
                    store.throughput.setdefault(instances, []).append(throughput)
        made += 2 * clients * (scale_calls // clients)
    for store in stores:
        store.sizes["after"] = store.size()
        added = store.sizes["after"][1] - store.sizes["before"][1]
        check(added == made, f"{store.label}: {made} fresh keys left {added} new records")
        store.sizes["vacuumed"] = store.size(vacuum=True)


def report_stores(stores: list[Store], postgres: Postgres, calls: int, clients: int, scale_calls: int) -> None:
    """Section 5's three tables; the PostgreSQL rows say why they are missing, if they are."""
    measured = {store.label: store for store in stores}
    missing = f"not measured ({postgres.missing})"

    rows = []
    for label in STORE_KEYED_TARGET:
        if label in measured:
            rows += round_trip_rows(measured[label].subject)
        else:
            rows.append([label, missing, "", "", "", "", ""])
    print_table(f"5a. Shared stores: round trip over HTTP on the 2.x server, quiet ({calls} calls of each kind, "
                f"interleaved)", ROUND_TRIP_COLUMNS, rows,
                "The unkeyed call (charge_unguarded) writes the same ledger in the same store, so the ratios are "
                "what the claim, the record and the replay cost on top of a call that already writes. "
                "SQLite's targets: keyed <= 1.10, replay <= 0.80; PostgreSQL's: keyed <= 1.25, replay <= 0.80.")

    rows = []
    for label in STORE_KEYED_TARGET:
        if label not in measured:
            rows.append([label, missing, "", "", "", "", ""])
            continue
        sizes = measured[label].sizes
        (empty, _, _), (before, rows_before, _) = sizes["empty"], sizes["before"]
        (after, rows_after, _), (vacuumed, live, outcomes) = sizes["after"], sizes["vacuumed"]
        added = rows_after - rows_before
        rows.append([label, added, f"{before} -> {after}", f"{(after - before) / added:.0f}",
                     f"{empty} -> {vacuumed}", f"{(vacuumed - empty) / live:.0f}", f"{outcomes / live:.0f}"])
    print_table("5b. Shared stores: bytes per stored record",
                ["store", "records added", "bytes before -> after", "bytes per record, as written",
                 "bytes empty -> after VACUUM", "bytes per record, live", "of which outcome text"], rows,
                "SQLite: page_count x page_size of the database file, the WAL's pages included. PostgreSQL: "
                "pg_total_relation_size of idempotency_records: heap, TOAST and both indexes. \"As written\": the "
                "growth over the keyed calls of 5c, divided by the records they added (one each, checked). "
                "\"Live\": the store after VACUUM (FULL, for PostgreSQL), less the empty store, divided by every "
                "record it holds. A record is a completed call: key, fingerprint, expiry and its outcome as JSON text.")

    rows = []
    for label in STORE_KEYED_TARGET:
        if label not in measured:
            rows.append([label, missing, "", "", "", ""])
            continue
        one = percentile(measured[label].throughput[1], 50)
        many = percentile(measured[label].throughput[INSTANCES], 50)
        rows.append([label, f"{one:.0f}", f"{many:.0f}", f"{many / one:.2f}", clients, os.cpu_count()])
    print_table(f"5c. Shared stores: {INSTANCES} instances on one store against 1 ({scale_calls} fresh keyed calls "
                f"a round from {clients} client threads, median of {ROUNDS} alternated rounds)",
                ["store", "calls/s, 1 instance", f"calls/s, {INSTANCES} instances", f"{INSTANCES} / 1",
                 "client threads", "CPU cores"], rows,
                f"No target. Every process (the instances, the client threads, PostgreSQL) shares these "
                f"{os.cpu_count()} cores, so {INSTANCES} instances can at best add the cores one instance leaves idle; "
                f"beyond that the figure shows what sharing one store costs (SQLite lets one writer in at a time, "
                f"across processes). Every round's charges were counted: exactly one per call.")


# ----------------------------------------------------------------------------
# 6. Authorisation: the round trip with OAuth on, beside the same without it
# ----------------------------------------------------------------------------

# Each store's targets, as sections 1 and 5 set them: a token's check must leave them met.
AUTH_TARGETS = {"memory": (KEYED_TARGET, REPLAY_TARGET),
                "SQLite": (STORE_KEYED_TARGET["SQLite"], STORE_REPLAY_TARGET),
                "PostgreSQL": (STORE_KEYED_TARGET["PostgreSQL"], STORE_REPLAY_TARGET)}
WITHOUT, WITH = "no authorisation", "OAuth, --issuer"


def new_store(label: str, folder: Path, postgres: Postgres) -> str:
    """A new, empty store of the kind `label` names: memory, a SQLite file in `folder`, or a PostgreSQL database."""
    if label == "memory":
        return "memory"
    return f"sqlite:{folder / uuid.uuid4().hex}.db" if label == "SQLite" else postgres.create()


def authorisation(calls: int, postgres: Postgres) -> None:
    """Section 6: each store without and with OAuth, every server in one interleaved loop, on a store of its own."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    labels = [label for label in AUTH_TARGETS if label != "PostgreSQL" or postgres.missing is None]
    configurations = [(label, mode) for label in labels for mode in (WITHOUT, WITH)]
    issuer = Issuer()  # the real one, as the tests start it: Authlib, client credentials, RS256 JWTs
    try:
        progress(f"6. authorisation: {', '.join(labels)}, each without and with OAuth, "
                 f"{min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls")
        room = room_for(1 + min(WARMUP_ROUNDS, calls) + calls)
        oauth = ("--issuer", issuer.url, "--resource", RESOURCE)
        wires = launch_all(*[(("2x-http", "--store", new_store(label, folder, postgres), *room,
                               *(oauth if mode == WITH else ())),
                              {"headers": bearer(issuer.token("alice")) if mode == WITH else None})
                             for label, mode in configurations])
        try:
            subjects = {(label, mode): Subject(f"{label}, {mode}", wire, *AUTH_TARGETS[label])
                        for (label, mode), wire in zip(configurations, wires)}
            round_trips(list(subjects.values()), calls)
        finally:
            close_all(wires)
    finally:
        issuer.close()
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    report_authorisation(subjects, postgres, calls)


def report_authorisation(subjects: dict[tuple[str, str], Subject], postgres: Postgres, calls: int) -> None:
    """Section 6's two tables: every round trip, then the ratios side by side and what the token's check adds."""
    missing = f"not measured ({postgres.missing})"
    rows = []
    for label in AUTH_TARGETS:
        for mode in (WITHOUT, WITH):
            if (label, mode) in subjects:
                rows += round_trip_rows(subjects[label, mode])
            else:
                rows.append([f"{label}, {mode}", missing, "", "", "", "", ""])
    print_table(f"6a. Authorisation: round trip over HTTP on the 2.x server, quiet, without and with OAuth "
                f"({calls} calls of each kind, interleaved)", ROUND_TRIP_COLUMNS, rows,
                "Every server ran on a store of its own (a SQLite file, a PostgreSQL database), all of them "
                "measured in one loop, interleaved call by call. With OAuth, the server trusts the real issuer "
                "(sdk2/issuer.py) and every call carries one bearer access token (RS256, both scopes); the "
                "targets are each store's, as in sections 1 and 5.")

    rows = []
    for label in AUTH_TARGETS:
        if (label, WITH) not in subjects:
            rows.append([label, missing, "", "", "", "", ""])
            continue
        median = {(mode, kind): percentile(subjects[label, mode].samples[kind], 50)
                  for mode in (WITHOUT, WITH) for kind in KINDS}
        rows.append([label, *(f"{median[mode, kind] / median[mode, UNKEYED]:.3f}"
                              for kind in (FRESH, REPLAY) for mode in (WITHOUT, WITH)),
                     f"{median[WITH, UNKEYED] / median[WITHOUT, UNKEYED]:.3f}",
                     f"{median[WITH, UNKEYED] - median[WITHOUT, UNKEYED]:.0f}"])
    print_table("6b. Authorisation: keyed over unkeyed without and with OAuth, and what the token's check costs",
                ["store", "executes / unkeyed, without", "executes / unkeyed, with OAuth", "replay / unkeyed, without",
                 "replay / unkeyed, with OAuth", "unkeyed with OAuth / without", "µs added per request"], rows,
                "Medians of 6a. The first four columns are what a key costs with authorisation off and on: the "
                "record's key holds the token's issuer and subject, so scoping adds no store round trip. The last "
                "two are what authorisation costs every request, keyed or not: the SDK's bearer check (joserfc "
                "verifies the token's RS256 signature against the cached JWKS, then its claims) and the "
                "per-tool scope check, which reads the body once more. No target: the price of OAuth, not of "
                "the key.")


# ----------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------

SECTIONS = "123456"


def parse_args() -> argparse.Namespace:
    """The counts, the sections, PostgreSQL and the results file; small counts make a smoke test."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, default=SERVER, help="the 1.x server script (default: server.py)")
    parser.add_argument("--calls", type=int, default=1000, metavar="N",
                        help="sections 1, 5 and 6: calls of each kind on each server (default: 1000)")
    parser.add_argument("--repeats", type=int, default=100, metavar="N",
                        help="section 2: repetitions at each size (default: 100)")
    parser.add_argument("--records", type=int, default=10_000, metavar="N",
                        help="section 3: records stored (default: 10000)")
    parser.add_argument("--in-flight", type=int, default=1000, metavar="N",
                        help="section 4: calls in flight at once (default: 1000)")
    parser.add_argument("--clients", type=int, default=8, metavar="N",
                        help="section 5: client threads spreading keyed calls over the instances (default: 8)")
    parser.add_argument("--scale-calls", type=int, default=400, metavar="N",
                        help="section 5: keyed calls in each round on 1 and on 4 instances (default: 400)")
    parser.add_argument("--postgres", default=os.environ.get("SEP3182_POSTGRES"), metavar="URL",
                        help="sections 5 and 6: a PostgreSQL server to make databases on "
                             "(default: $SEP3182_POSTGRES)")
    parser.add_argument("--sections", default=SECTIONS, metavar="DIGITS",
                        help=f"which sections to run, e.g. 15 (default: {SECTIONS})")
    parser.add_argument("--write", type=Path, metavar="PATH",
                        help="also write the tables, under a header line, to PATH (e.g. benchmarks/RESULTS.md)")
    args = parser.parse_args()
    if set(args.sections) - set(SECTIONS):
        parser.error(f"--sections takes digits of {SECTIONS}, not {args.sections!r}")
    if min(args.calls, args.repeats, args.records, args.in_flight, args.clients) < 1 or args.scale_calls < args.clients:
        parser.error("every count must be at least 1, and --scale-calls at least --clients")
    return args


def sdk2_versions() -> tuple[str, str]:
    """The mcp and SQLite versions of the 2.x environment."""
    script = "import importlib.metadata as m, sqlite3; print(m.version('mcp'), sqlite3.sqlite_version)"
    run = subprocess.run([sdk2_python(), "-c", script], capture_output=True, text=True, check=True)
    mcp2, sqlite = run.stdout.split()
    return mcp2, sqlite


def main() -> None:
    """Print the header, then each section as it finishes; --write the whole report at the end."""
    args = parse_args()
    server_path = args.server.resolve()
    postgres = Postgres(args.postgres if {"5", "6"} & set(args.sections) else None)
    mcp2, sqlite = sdk2_versions()
    started = time.monotonic()
    emit("# SEP-3182 idempotency benchmark\n")
    emit(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
         f"mcp {version('mcp')} ({server_path.relative_to(ROOT) if server_path.is_relative_to(ROOT) else server_path})"
         f", mcp {mcp2} (sdk2/server.py), SQLite {sqlite}, "
         + (f"PostgreSQL {postgres.version}" if postgres.version else "PostgreSQL not measured"))
    emit(f"\n`benchmarks/bench.py --calls {args.calls} --repeats {args.repeats} --records {args.records} "
         f"--in-flight {args.in_flight} --clients {args.clients} --scale-calls {args.scale_calls}"
         + ("" if args.sections == SECTIONS else f" --sections {args.sections}") + "`")
    if "1" in args.sections:
        round_trip(server_path, args.calls)
    if "2" in args.sections:
        fingerprint_cost(args.repeats)
    if "3" in args.sections:
        memory(server_path, args.records)
    if "4" in args.sections:
        concurrency(server_path, args.in_flight)
    if "5" in args.sections:
        shared_stores(args.calls, args.clients, args.scale_calls, postgres)
    if "6" in args.sections:
        authorisation(args.calls, postgres)
    progress(f"done in {time.monotonic() - started:.0f} s")
    if args.write:
        args.write.write_text("\n".join(REPORT) + "\n", encoding="utf-8")
        progress(f"wrote {args.write}")


if __name__ == "__main__":
    main()
