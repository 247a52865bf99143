"""Section 7: each tuning choice of the stores, measured on and off side by side in one loop.

The stores are not edited: a server runs without one choice through
benchmarks/instruments/sitecustomize.py (SEP3182_BENCH_UNDO), which wraps the store
from outside so that it takes its own other path. The fingerprint's choice of digest
is section 2b's.
"""

import shutil
import tempfile
from pathlib import Path

import trips
from harness import (
    FRESH,
    REPLAY,
    UNKEYED,
    WARMUP_ROUNDS,
    Postgres,
    Subject,
    close_all,
    launch_all,
    new_store,
    print_table,
    progress,
    records_after,
    room_for,
    round_trips,
    share_for,
)
from shared_stores import KEYED_TARGET, REPLAY_TARGET

AS_SHIPPED = None
LAZY_SAVEPOINTS = "lazy savepoints: the tool's nested unit of work sent with its first statement, not on its own"
# Each choice: the store it is a choice of, what undoes it (SEP3182_BENCH_UNDO), and what it is, as the table reads it.
CHOICES = [
    (
        "SQLite",
        "claim-in-thread",
        "the claim on the event loop (synchronous=NORMAL, never waiting), not in a worker thread on the writer",
    ),
    (
        "SQLite",
        "synchronous-normal",
        "the writer's commits with synchronous=FULL (P17: a charge the client was told of survives power loss), "
        "not NORMAL",
    ),
    ("SQLite", "eager-savepoints", LAZY_SAVEPOINTS),
    ("PostgreSQL", "eager-savepoints", LAZY_SAVEPOINTS),
]


def configurations(postgres: Postgres) -> list[tuple[str, str | None]]:
    """(store, choice undone) for every server of the section: each store as shipped, then each choice undone."""
    stores = ["SQLite"] + (["PostgreSQL"] if postgres.missing is None else [])
    return [(store, AS_SHIPPED) for store in stores] + [(store, undo) for store, undo, _ in CHOICES if store in stores]


def tuning(calls: int, postgres: Postgres) -> None:
    """Section 7: every configuration timed in one interleaved loop, then its round trips counted."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    chosen = configurations(postgres)
    try:
        progress(
            f"7. tuning: {len(chosen)} servers, {min(WARMUP_ROUNDS, calls)} warm-up rounds, "
            f"then {calls} rounds of 3 calls"
        )
        room = (*room_for(records_after(calls)), *share_for(records_after(calls)))
        wires = launch_all(
            *[
                (
                    ("2x-http", "--store", new_store(store, folder, postgres), *room),
                    {"instruments": {"SEP3182_BENCH_UNDO": undo} if undo else None},
                )
                for store, undo in chosen
            ]
        )
        try:
            subjects = {
                (store, undo): Subject(f"{store}, {undo or 'as shipped'}", wire, KEYED_TARGET[store], REPLAY_TARGET)
                for (store, undo), wire in zip(chosen, wires, strict=True)
            }
            round_trips(list(subjects.values()), calls)
        finally:
            close_all(wires)
        progress("7. round trips counted, each configuration on a store of its own")
        counted = {
            (store, undo): trips.count(f"{store}, {undo or 'as shipped'}", new_store(store, folder, postgres), undo)
            for store, undo in chosen
        }
    finally:
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    report_tuning(subjects, counted, calls)


# Two medians of one loop on shared cores differ by a few percent with no cause at all
# (section 1's unkeyed calls on alike servers): a smaller difference says nothing.
NOISE = 0.03


def for_speed(slower: float) -> str:
    """What undoing a choice did to the keyed call that executes: "pays" if it made it slower."""
    if abs(slower - 1) <= NOISE:
        return f"within noise (±{NOISE:.0%})"
    return "pays" if slower > 1 else "does not pay"


def report_tuning(subjects: dict, counted: dict, calls: int) -> None:
    """One row per choice: the store as shipped against the same store without it."""
    rows = []
    for store, undo, what in CHOICES:
        if (store, undo) not in subjects:
            continue
        shipped, undone = subjects[store, AS_SHIPPED], subjects[store, undo]
        ratios = [f"{subject.median(FRESH) / subject.median(UNKEYED):.3f}" for subject in (shipped, undone)]
        slower = {kind: undone.median(kind) / shipped.median(kind) for kind in (UNKEYED, FRESH, REPLAY)}
        trips_of = [f"{counted[store, key].trips(FRESH)}" for key in (AS_SHIPPED, undo)]
        rows.append(
            [
                store,
                what,
                *ratios,
                *(f"{slower[kind]:.3f}" for kind in (UNKEYED, FRESH, REPLAY)),
                " -> ".join(trips_of),
                for_speed(slower[FRESH]),
            ]
        )
    print_table(
        f"7. Tuning choices of the stores, on and off ({calls} calls of each kind, every server in one "
        f"interleaved loop)",
        [
            "store",
            "the choice",
            "executes / unkeyed, as shipped",
            "executes / unkeyed, without it",
            "without / with: unkeyed",
            "without / with: executes",
            "without / with: replay",
            "keyed round trips, with -> without",
            "for speed",
        ],
        rows,
        'Every configuration ran on a store of its own over HTTP; "without" is the same server with one '
        "choice undone from outside (benchmarks/instruments/sitecustomize.py, SEP3182_BENCH_UNDO), the store's "
        'own other path. "without / with" divides the medians of the same kind of call, measured side by '
        'side: above 1, the choice makes that call faster ("pays", judged on the keyed call that executes, '
        f"beyond {NOISE:.0%} either way). Round trips are counted as in 5b. "
        "synchronous=FULL is a durability rule (P17), not a speed choice: "
        "its row says what it costs.",
    )
