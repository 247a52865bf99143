"""What an idempotencyKey costs the demo server, in four measurements.

    python3 benchmarks/bench.py [--server PATH] [--calls N] [--repeats N] [--records N] [--in-flight N]

1. round trip over stdio: a call without a key, a keyed call that executes,
   and a keyed replay, against one server subprocess;
2. the fingerprint (P3) against the SDK's own parsing, as the arguments grow;
3. the memory one stored record takes, and whether expiry gives it all back;
4. many keyed calls in flight at once: exactly one charge each, and throughput.

Every target is printed with MET or MISSED. A missed target is a finding, so it
never fails the run; a wrong answer (an error reply, a charge too many or too
few) does, with a non-zero exit. The table goes to stdout, progress to stderr.
Sections 1 and 4 speak raw JSON-RPC to any server script with the demo's tools;
sections 2 and 3 import that script and use its module API (fingerprint_of,
clock, retention_seconds, max_records, forget_expired, server).
"""

import argparse
import gc
import importlib.util
import json
import math
import os
import random
import sys
import time
import tracemalloc
import uuid
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import NoReturn

import anyio
import mcp.types as types
from mcp.shared.exceptions import McpError
from mcp.shared.memory import create_connected_server_and_client_session

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from client_demo import call_tool  # noqa: E402
from wire import ABSENT, REPLY_TIMEOUT, SERVER, Wire  # noqa: E402

SEED = 3182  # any fixed seed: the same shuffles and payloads on every run and machine

# ----------------------------------------------------------------------------
# Shared helpers: one summary statistic, one verdict, one correctness check
# ----------------------------------------------------------------------------


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
    """One section of the report: a markdown table under its heading, and a line below it."""
    print(f"\n## {heading}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    if note:
        print(f"\n{note}")
    sys.stdout.flush()  # a long run shows each section as it finishes


def progress(message: str) -> None:
    """A diagnostic line on stderr, so stdout carries the table alone."""
    print(f"bench.py: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# 1. Round trip over stdio
# ----------------------------------------------------------------------------

UNKEYED, FRESH, REPLAY = "no key (charge_unguarded)", "fresh key, executes", "replay of a finished key"
KINDS = (UNKEYED, FRESH, REPLAY)
WARMUP_ROUNDS = 100  # the first calls pay for lazy imports, first validations and cold caches
KEYED_TARGET = 1.05  # a key may cost at most 5% on a call that runs the tool
REPLAY_TARGET = 1.00  # a replay skips the tool, so it must not be slower than running it


def timed_call(wire: Wire, tool: str, key=ABSENT) -> int:
    """Nanoseconds from writing one charge's request line to reading its response line."""
    # send_call serialises the message just before writing it: a few microseconds,
    # the same for every kind, against a round trip of about a millisecond.
    start = time.perf_counter_ns()
    line = wire.raw_reply(wire.send_call(tool, {"amount": 1}, key))
    elapsed = time.perf_counter_ns() - start
    succeeded(json.loads(line))
    return elapsed


def one_round(wire: Wire, rng: random.Random, keys: list[str]) -> dict[str, int]:
    """One call of each kind, in a shuffled order so that noise hits every kind alike."""
    latencies = {}
    for kind in rng.sample(KINDS, k=len(KINDS)):
        if kind == FRESH:
            keys.append(str(uuid.uuid4()))
        # A replay repeats the newest key, whose call has already answered: finished.
        tool, key = ("charge_unguarded", ABSENT) if kind == UNKEYED else ("charge_guarded", keys[-1])
        latencies[kind] = timed_call(wire, tool, key)
    return latencies


def round_trip(server_path: Path, calls: int) -> None:
    """Section 1: median and p99 latency of each kind of call, and the ratios of medians."""
    progress(f"1. round trip: {WARMUP_ROUNDS} warm-up rounds, then {calls} rounds of 3 calls")
    wire = Wire(server=server_path)
    try:
        rng = random.Random(SEED)
        keys = [str(uuid.uuid4())]
        timed_call(wire, "charge_guarded", keys[0])  # the first replay needs a finished key
        for _ in range(WARMUP_ROUNDS):
            one_round(wire, rng, keys)
        samples = {kind: [] for kind in KINDS}
        for _ in range(calls):
            for kind, latency in one_round(wire, rng, keys).items():
                samples[kind].append(latency / 1000)
        # The timings mean something only if a replay really skipped the tool.
        executed, ledger = 1 + 2 * (WARMUP_ROUNDS + calls), wire.ledger()
        check(ledger["charges"] == executed, f"expected {executed} charges, the ledger says {ledger}")
    finally:
        wire.close()
    unkeyed, rows = percentile(samples[UNKEYED], 50), []
    for kind, target in ((UNKEYED, None), (FRESH, KEYED_TARGET), (REPLAY, REPLAY_TARGET)):
        ratio = percentile(samples[kind], 50) / unkeyed
        judged = ["", ""] if target is None else [f"<= {target:.2f}", verdict(ratio <= target)]
        rows.append([kind, f"{percentile(samples[kind], 50):.0f}", f"{percentile(samples[kind], 99):.0f}",
                     f"{ratio:.3f}", *judged])
    print_table(f"1. Round trip over stdio ({calls} calls of each kind, interleaved)",
                ["call", "median µs", "p99 µs", "median / unkeyed", "target", ""], rows,
                f"The store held {len(keys)} records at the end: one per fresh key, warm-up included.")


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


def sdk_parse(line: str) -> types.ClientRequest:
    """The 1.x SDK's parsing and validation of one stdio line, before any handler runs."""
    # mcp/server/stdio.py:65 (1.9.4 and 1.30.0) parses each line, and
    # mcp/shared/session.py _receive_loop (1.30.0: 362-364, 1.9.4: 341-343)
    # validates a dump of it as the session's request type, which
    # mcp/server/session.py:96 (1.9.4: 90) makes types.ClientRequest.
    message = types.JSONRPCMessage.model_validate_json(line)
    return types.ClientRequest.model_validate(message.root.model_dump(by_alias=True, mode="json", exclude_none=True))


def fingerprint_timings(server, line: str, repeats: int) -> tuple[float, float]:
    """Median nanoseconds of the fingerprint and of the SDK's parse, interleaved."""
    fingerprint, parse = [], []
    # As in the server, each fingerprint reads the request the SDK has just
    # parsed, so neither measurement runs on a cache the other left cold.
    # The garbage collector is off while timing, as timeit does: a collection
    # lands on whichever call crosses its threshold, which is noise, not cost.
    # Pydantic models hold no cycles, so nothing waits for it meanwhile.
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            request = sdk_parse(line).root
            parsed = time.perf_counter_ns()
            server.fingerprint_of(request)
            fingerprint.append(time.perf_counter_ns() - parsed)
            parse.append(parsed - start)
    finally:
        gc.enable()
    return percentile(fingerprint, 50), percentile(parse, 50)


def fingerprint_cost(server, repeats: int) -> None:
    """Section 2: the fingerprint against the SDK's parse, per size, and its ns per byte."""
    progress(f"2. fingerprint: {repeats} repetitions at each of {', '.join(SIZES)}")
    rows, ns_per_byte = [], {}
    for label, size in SIZES.items():
        arguments = arguments_of_size(size)
        line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "charge_guarded", "arguments": arguments, "idempotencyKey": str(uuid.UUID(int=SEED))}})
        length = len(json.dumps(arguments, separators=(",", ":")).encode())
        fingerprint, parse = fingerprint_timings(server, line, repeats)
        ns_per_byte[label] = fingerprint / length
        rows.append([label, length, f"{fingerprint / 1000:.1f}", f"{parse / 1000:.1f}", f"{fingerprint / parse:.2f}",
                     f"<= {FINGERPRINT_TARGET}", verdict(fingerprint / parse <= FINGERPRINT_TARGET),
                     f"{ns_per_byte[label]:.1f}"])
    growth = ns_per_byte["1 MiB"] / ns_per_byte["64 KiB"]
    print_table(f"2. Fingerprint cost against argument size (in process, medians of {repeats} interleaved repetitions)",
                ["arguments", "JSON bytes", "fingerprint µs", "SDK parse µs", "fingerprint / SDK", "target", "",
                 "fingerprint ns/byte"], rows,
                f"Growth from 64 KiB to 1 MiB: ns/byte x{growth:.2f} (target <= {LINEAR_TARGET}, linear): "
                f"{verdict(growth <= LINEAR_TARGET)}.")


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
            for _ in range(WARMUP_CALLS):
                await call(session, "charge_guarded", {"amount": 1}, str(uuid.uuid4()))
            await call(session, "get_balance", {})  # called once below: its validator is built here
            await call(session, "reset_ledger", {})  # empties the store and the ledger
            server.max_records = records  # room for every record, now that the store is empty
            baseline = traced_bytes()
            for _ in range(records):
                await call(session, "charge_guarded", {"amount": 1}, str(uuid.uuid4()))
            stored = traced_bytes()
            charges = json.loads((await call(session, "get_balance", {})).content[0].text)["charges"]
            check(charges == records, f"expected {records} charges, the ledger says {charges}")
            server.clock = lambda: server.retention_seconds + 1  # one second past every window
            server.forget_expired()
            expired = traced_bytes()
    finally:
        tracemalloc.stop()
    return (stored - baseline) / records, expired - baseline


def memory(server, records: int) -> None:
    """Section 3: what the store holds per record, and what expiry gives back."""
    progress(f"3. memory: {records} keyed calls through the in-memory session, under tracemalloc")
    per_record, residue = anyio.run(store_memory, server, records)
    print_table(f"3. Memory of the store (tracemalloc, in process, {records} records of the demo's real results)",
                ["measure", "bytes", "target", ""],
                [["per stored record", f"{per_record:.0f}", f"<= {RECORD_TARGET}",
                  verdict(per_record <= RECORD_TARGET)],
                 ["left above the baseline after expiry", f"{residue}", f"<= {RESIDUE_TARGET}",
                  verdict(residue <= RESIDUE_TARGET)]])


# ----------------------------------------------------------------------------
# 4. Concurrency
# ----------------------------------------------------------------------------

ROUNDS = 3  # batches of each kind, alternated: a median of three shrugs off one noisy burst
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
    wire = Wire(server=server_path)
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
    print_table(f"4. Concurrency over stdio ({count} calls in flight at once, median of {ROUNDS} alternated rounds)",
                ["calls", "calls/s", "charges per burst", "target", ""],
                [["no key", f"{unkeyed:.0f}", count, f"== {count}", "MET"],
                 ["distinct keys", f"{keyed:.0f}", count, f"== {count}", "MET"],
                 ["keyed / unkeyed throughput", f"{keyed / unkeyed:.3f}", "", f">= {THROUGHPUT_TARGET}",
                  verdict(keyed / unkeyed >= THROUGHPUT_TARGET)]],
                "A wrong charge count fails the run: every burst above charged exactly once per call.")


# ----------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------


def load_server(path: Path):
    """Import the server script as a module: it builds its FastMCP object, it does not serve."""
    spec = importlib.util.spec_from_file_location("server_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def parse_args() -> argparse.Namespace:
    """The server to measure, and the counts; small counts make a smoke test."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, default=SERVER, help="the server script (default: the repo's server.py)")
    parser.add_argument("--calls", type=int, default=2000, metavar="N", help="section 1: calls of each kind")
    parser.add_argument("--repeats", type=int, default=100, metavar="N", help="section 2: repetitions at each size")
    parser.add_argument("--records", type=int, default=10_000, metavar="N", help="section 3: records stored")
    parser.add_argument("--in-flight", type=int, default=1000, metavar="N", help="section 4: calls in flight at once")
    return parser.parse_args()


def main() -> None:
    """Print the header, then each section as it finishes."""
    args = parse_args()
    server_path = args.server.resolve()
    print("# SEP-3182 idempotency benchmark\n")
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, mcp {version('mcp')}, server {server_path}")
    round_trip(server_path, args.calls)
    server = load_server(server_path)
    fingerprint_cost(server, args.repeats)
    memory(server, args.records)
    concurrency(server_path, args.in_flight)


if __name__ == "__main__":
    main()
