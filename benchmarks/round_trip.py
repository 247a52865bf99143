"""Section 1: the round trip per target (1x-stdio, 2x-stdio, 2x-http), quiet and with --verbose, in one loop."""

from pathlib import Path

from harness import (
    ROUND_TRIP_COLUMNS,
    WARMUP_ROUNDS,
    Subject,
    close_all,
    launch_all,
    print_table,
    progress,
    records_after,
    room_for,
    round_trip_rows,
    round_trips,
    share_for,
)
from wire import TARGETS

KEYED_TARGET = 1.05  # a key may cost at most 5% on a call that runs the tool
REPLAY_TARGET = 1.00  # a replay skips the tool, so it must not be slower than running it


def target_args(target: str, calls: int) -> tuple[str, ...]:
    """Section 1's conditions: the 2.x server on its memory store, as the 1.x server keeps its dicts."""
    room = room_for(records_after(calls))
    return room if target == "1x-stdio" else ("--store", "memory", *room, *share_for(records_after(calls)))


def round_trip(server_path: Path, calls: int) -> None:
    """Section 1: every target, quiet and --verbose, six servers measured in one interleaved loop."""
    progress(f"1. round trip: 6 servers, {min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls")
    configurations = [(target, verbose) for verbose in (False, True) for target in TARGETS]
    wires = launch_all(
        *[
            ((target, *target_args(target, calls)), {"verbose": verbose, "server": server_path})
            for target, verbose in configurations
        ]
    )
    try:
        subjects = [
            Subject(target, wire, KEYED_TARGET, REPLAY_TARGET)
            for (target, _), wire in zip(configurations, wires, strict=True)
        ]
        round_trips(subjects, calls)
    finally:
        close_all(wires)
    for verbose, (suffix, heading) in (
        (False, ("a", "as a user runs the servers: quiet, the default")),
        (True, ("b", "with --verbose: the decision log on, as the demos run it")),
    ):
        rows = [
            row
            for subject, (_, v) in zip(subjects, configurations, strict=True)
            if v == verbose
            for row in round_trip_rows(subject)
        ]
        print_table(
            f"1{suffix}. Round trip per target, {heading} ({calls} calls of each kind, interleaved)",
            ROUND_TRIP_COLUMNS,
            rows,
            f"All six servers (1a and 1b) were measured in one loop, interleaved call by call. "
            f"The 2.x servers ran with --store memory. Each store held {records_after(calls)} records at "
            f"the end: one per fresh key, warm-up included."
            if verbose
            else "",
        )
