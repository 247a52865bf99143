"""The TypeScript server's round trip: what a key costs on the mcp-idempotency package, as section 1 measures it.

    PYTHONPATH=tests:. .venv/bin/python benchmarks/typescript.py [--calls N]

typescript/dist/server.js (the example built on the package, its memory store) over stdio, quiet, as a user
runs it (tests/wire.py speaks HTTP only in 2026-07-28, which the SDK 1.x server does not): a call without a key, a
keyed call that executes and a keyed replay, interleaved call by call in one loop (harness.round_trips), so that
the machine's noise hits every kind alike. The targets are section 1's: a key costs at most 5% on a call that
runs the tool, and a replay is faster than an unkeyed call. The ratios are the findings; the microseconds say
what they are ratios of.
"""

import argparse

from harness import ROUND_TRIP_COLUMNS, WARMUP_ROUNDS, Subject, close_all, print_table, progress, round_trip_rows
from harness import round_trips as interleaved
from kit_targets import typescript_server
from node_packages import typescript_built
from wire import LegacyStdioWire

KEYED_TARGET = 1.05
REPLAY_TARGET = 1.00


def launched() -> list[Subject]:
    """The TypeScript server over stdio, on its memory store, bounded above what the run keeps."""
    typescript_built()
    room = ["--max-records", "100000", "--max-records-per-principal", "100000"]
    wire = LegacyStdioWire("ts-stdio", [*typescript_server(), *room])
    return [Subject(wire.target, wire, KEYED_TARGET, REPLAY_TARGET)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, metavar="N", help="calls of each kind (default: 600)")
    calls = parser.parse_args().calls
    progress(f"TypeScript round trip: 1 server, {min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds")
    subjects = launched()
    try:
        interleaved(subjects, calls)
    finally:
        close_all([subject.wire for subject in subjects])
    print_table(
        f"TypeScript server on mcp-idempotency, memory store ({calls} calls of each kind, interleaved)",
        ROUND_TRIP_COLUMNS,
        [row for subject in subjects for row in round_trip_rows(subject)],
    )


if __name__ == "__main__":
    main()
