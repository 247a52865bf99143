"""What an idempotencyKey costs both servers, in nine measurements.

    PYTHONPATH=tests:. .venv/bin/python benchmarks/bench.py [--calls N] [--repeats N] [--records N]
        [--in-flight N] [--clients N] [--scale-calls N] [--held N] [--postgres URL] [--sections 123456789]
        [--server PATH] [--prototype PATH]
        [--write PATH]

    e.g. PYTHONPATH=tests:. .venv/bin/python benchmarks/bench.py --calls 600 --repeats 100 --records 5000 \\
             --in-flight 500 --scale-calls 320 --write benchmarks/RESULTS.md   (about 13 minutes on 2 shared cores)

It runs with the mcp 1.x environment (.venv), with tests/ (the wire its servers are
spoken to through) and the project (client_demo.py) on PYTHONPATH, and starts the
mcp 2.x server, `python -m mcp_idempotency_demo.ledger_server`, with .venv-2x (or
$SEP3182_SDK2_PYTHON), as tests/wire.py does. Every server runs without that
PYTHONPATH, as a user starts it. Each section is a module of this folder:

1. round_trip.py: per target (1x-stdio, 2x-stdio, 2x-http), a call without a key, a
   keyed call that executes and a keyed replay, against the servers as a user runs
   them (quiet; the 2.x server on its memory store, like the 1.x one's dicts) and,
   interleaved with them, the same servers with --verbose, as the demos run them;
   then prototype.py: server.py against the seed prototype, given a copy's path;
2. fingerprint.py: each server's own fingerprint (P3) against its SDK's own parse of
   the same tools/call line, as the arguments grow, timed within each SDK's
   interpreter (fingerprint_timing.py); and its digest, BLAKE2b against SHA-256;
3. memory.py: the memory one record takes in the 1.x server's store, and whether
   expiry gives it all back;
4. concurrency.py: 1,000 calls in flight at once on the 1.x server over stdio:
   exactly one charge each, and the throughput with distinct keys against none;
5. shared_stores.py: the 2.x layer over HTTP on memory, SQLite and PostgreSQL side
   by side: the round trip, the store round trips of each kind of call counted
   (trips.py, instruments/), the bytes one record takes, and four instances on one
   store against one;
6. authorisation.py: section 5's round trip on each store without and, interleaved
   with it, with OAuth (--issuer, the real issuer, a bearer token on every call);
7. tuning.py: each tuning choice of the stores on and off, side by side;
8. share.py: a principal's share (P9') on each store, holding nothing against
   holding --held live records, side by side;
9. other_principal.py: behind OAuth, Bob's keyed calls under keys Alice used
   against keys nobody used, side by side (K2, P21: what the lookup shows him).

Every target is printed with MET or MISSED. A missed target is a finding, so it
never fails the run; a wrong answer (an error reply, a charge too many or too
few, a record too many or too few) does, with a non-zero exit. The tables go to
stdout (and with --write to a file, under a header naming the machine, its load
and the SDKs), progress to stderr.

The servers are started with tests/wire.py's Wire classes, but quiet unless a
configuration says --verbose: wire.start() always passes --verbose, which the
tests need for their log assertions and a user's server does not have. Over HTTP
the timed calls use one kept-alive connection per client, as the SDK's own
client (httpx) does, rather than the wire's fresh connection and thread per
message, so that less of each figure is the harness. Sections 5 to 7 need a
PostgreSQL server for their PostgreSQL rows (8 and 9 too; --postgres, default $SEP3182_POSTGRES):
they make databases of their own there and drop them afterwards; without one those
rows say "not measured".
"""

import argparse
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

try:
    from harness import REPORT, ROOT, Postgres, emit, progress
    from wire import SERVER, sdk2_python
except ModuleNotFoundError as missing:  # wire lives in tests/
    sys.exit(f"bench.py: {missing}: run it with tests/ and the project on PYTHONPATH, as its docstring says")

from authorisation import authorisation
from concurrency import concurrency
from fingerprint import fingerprint_cost
from memory import memory
from other_principal import other_principal
from prototype import against_prototype
from round_trip import round_trip
from share import share_cost
from shared_stores import shared_stores
from tuning import tuning

SECTIONS = "123456789"
NEEDS_POSTGRES = {"5", "6", "7", "8", "9"}


def parse_args() -> argparse.Namespace:
    """The counts, the sections, PostgreSQL and the results file; small counts make a smoke test."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, default=SERVER, help="the 1.x server script (default: server.py)")
    parser.add_argument(
        "--prototype",
        type=Path,
        metavar="PATH",
        help="section 1: a copy of the seed prototype's server.py, measured beside server.py (default: not measured)",
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=1000,
        metavar="N",
        help="sections 1 and 5 to 9: calls of each kind on each server (default: 1000)",
    )
    parser.add_argument(
        "--repeats", type=int, default=100, metavar="N", help="section 2: repetitions at each size (default: 100)"
    )
    parser.add_argument(
        "--records", type=int, default=5000, metavar="N", help="section 3: records stored, twice (default: 5000)"
    )
    parser.add_argument(
        "--in-flight", type=int, default=1000, metavar="N", help="section 4: calls in flight at once (default: 1000)"
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=8,
        metavar="N",
        help="section 5: client threads spreading keyed calls over the instances (default: 8)",
    )
    parser.add_argument(
        "--scale-calls",
        type=int,
        default=400,
        metavar="N",
        help="section 5: keyed calls in each round on 1 and on 4 instances (default: 400)",
    )
    parser.add_argument(
        "--held",
        type=int,
        default=900,
        metavar="N",
        help="section 8: live records one server's principal holds before the timed calls (default: 900)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("SEP3182_POSTGRES"),
        metavar="URL",
        help="sections 5 to 9: a PostgreSQL server to make databases on (default: $SEP3182_POSTGRES)",
    )
    parser.add_argument(
        "--sections", default=SECTIONS, metavar="DIGITS", help=f"which sections to run, e.g. 15 (default: {SECTIONS})"
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="PATH",
        help="also write the tables, under a header line, to PATH (e.g. benchmarks/RESULTS.md)",
    )
    args = parser.parse_args()
    if set(args.sections) - set(SECTIONS):
        parser.error(f"--sections takes digits of {SECTIONS}, not {args.sections!r}")
    counts = (args.calls, args.repeats, args.records, args.in_flight, args.clients, args.held)
    if min(counts) < 1 or args.scale_calls < args.clients:
        parser.error("every count must be at least 1, and --scale-calls at least --clients")
    return args


def sdk2_versions() -> tuple[str, str]:
    """The mcp and SQLite versions of the 2.x environment."""
    script = "import importlib.metadata as m, sqlite3; print(m.version('mcp'), sqlite3.sqlite_version)"
    run = subprocess.run([sdk2_python(), "-c", script], capture_output=True, text=True, check=True)
    mcp2, sqlite = run.stdout.split()
    return mcp2, sqlite


def load() -> str:
    """The machine's load average over the last minute: other work on these cores while the bench ran."""
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    """Print the header, then each section as it finishes; --write the whole report at the end."""
    args = parse_args()
    server_path = args.server.resolve()
    postgres = Postgres(args.postgres if NEEDS_POSTGRES & set(args.sections) else None)
    mcp2, sqlite = sdk2_versions()
    started, load_at_start = time.monotonic(), load()
    emit("# SEP-3182 idempotency benchmark\n")
    emit(
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"mcp {version('mcp')} ({server_path.relative_to(ROOT) if server_path.is_relative_to(ROOT) else server_path})"
        f", mcp {mcp2} (mcp_idempotency_demo.ledger_server), SQLite {sqlite}, "
        + (f"PostgreSQL {postgres.version}" if postgres.version else "PostgreSQL not measured")
    )
    emit(
        f"\n`benchmarks/bench.py --calls {args.calls} --repeats {args.repeats} --records {args.records} "
        f"--in-flight {args.in_flight} --clients {args.clients} --scale-calls {args.scale_calls}"
        + f" --held {args.held}"
        + ("" if args.sections == SECTIONS else f" --sections {args.sections}")
        + "`"
    )
    sections = {
        "1": lambda: (round_trip(server_path, args.calls), against_prototype(server_path, args.prototype, args.calls)),
        "2": lambda: fingerprint_cost(server_path, args.repeats),
        "3": lambda: memory(server_path, args.records),
        "4": lambda: concurrency(server_path, args.in_flight),
        "5": lambda: shared_stores(args.calls, args.clients, args.scale_calls, postgres),
        "6": lambda: authorisation(args.calls, postgres),
        "7": lambda: tuning(args.calls, postgres),
        "8": lambda: share_cost(args.calls, args.held, postgres),
        "9": lambda: other_principal(args.calls, postgres),
    }
    for number in SECTIONS:
        if number in args.sections:
            sections[number]()
    elapsed = time.monotonic() - started
    emit(
        f"\nLoad average {load_at_start} at the start and {load()} at the end (`os.getloadavg`, one minute), "
        f"{elapsed:.0f} s in all, on {os.cpu_count()} cores that other work shares: only the ratios, taken between "
        f"measurements interleaved call by call, are meant to be read."
    )
    progress(f"done in {elapsed:.0f} s")
    if args.write:
        args.write.write_text("\n".join(REPORT) + "\n", encoding="utf-8")
        progress(f"wrote {args.write}")


if __name__ == "__main__":
    main()
