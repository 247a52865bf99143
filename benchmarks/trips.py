"""The store round trips of one call of each kind, counted in a real 2.x server (benchmarks/instruments/).

A counted server is never a timed one: writing a line per trip would add to what is
timed. It runs on a store of its own, beside the timed servers of the same section.
"""

import json
import os
import tempfile
from dataclasses import dataclass, field

from harness import FRESH, KINDS, REPLAY, UNKEYED, HttpCaller, check, launch, succeeded
from wire import ABSENT

WARMUP = 3  # calls of each kind before counting: asyncpg prepares each statement on its first use
FLOOR = 1  # a keyed call that executes needs one trip more than an unkeyed one: its claim


@dataclass
class Counted:
    """What a store sent for one call of each kind: one line per trip or statement (see instruments/)."""

    label: str
    sent: dict[str, list[str]] = field(default_factory=dict)

    def trips(self, kind: str) -> int:
        """Round trips: hops to a worker thread (SQLite's unit of work) and calls to the PostgreSQL server."""
        return sum(line == "thread" or line.startswith("pg ") for line in self.sent[kind])

    def statements(self, kind: str) -> int:
        return sum(line.startswith(("sqlite ", "pg ")) for line in self.sent[kind])


def count(label: str, store: str, undo: str | None = None) -> Counted:
    """Start a counted server on `store`, warm it up, and record what one call of each kind sends."""
    handle, path = tempfile.mkstemp(prefix="sep3182-trips-")
    os.close(handle)
    instruments = {"SEP3182_BENCH_TRIPS": path, **({"SEP3182_BENCH_UNDO": undo} if undo else {})}
    wire = launch("2x-http", "--store", store, instruments=instruments)
    counted, caller, keys = Counted(label), HttpCaller(wire), [f"count-{label}-{n}" for n in range(WARMUP + 1)]
    try:
        for key in keys[:WARMUP]:
            for tool, sent in (("charge_unguarded", ABSENT), ("charge_guarded", key), ("charge_guarded", key)):
                succeeded(json.loads(caller.call(tool, sent)))
        for kind, (tool, key) in zip(
            KINDS,
            (("charge_unguarded", ABSENT), ("charge_guarded", keys[-1]), ("charge_guarded", keys[-1])),
            strict=True,
        ):
            before = os.path.getsize(path)
            succeeded(json.loads(caller.call(tool, key)))  # every line of its trips is written before it answers
            with open(path, encoding="utf-8") as lines:
                lines.seek(before)
                counted.sent[kind] = lines.read().splitlines()
        charges = wire.ledger()["charges"]
        check(charges == 2 * (WARMUP + 1), f"{label}: counted calls made {charges} charges")
    finally:
        caller.close()
        wire.close()
        os.unlink(path)
    return counted


def spelled(sent: list[str]) -> str:
    """The trips of one call, readably: `loop: SELECT BEGIN ... · thread: BEGIN+SAVEPOINT UPDATE · ...`."""
    groups: list[list[str]] = []
    for line in sent:
        words = line.split()
        if line == "thread":
            groups.append(["thread:"])
        elif words[0] == "sqlite" and words[1] == "loop":
            if not groups or groups[-1][0] != "loop:":
                groups.append(["loop:"])
            groups[-1].append(words[2])
        elif words[0] == "sqlite":
            groups[-1].append(words[2])  # inside the hop just noted
        else:  # pg METHOD WORDS: a trip each
            groups.append([words[2]])
    return " · ".join(" ".join(group) for group in groups) or "nothing"


COLUMNS = ["store", "call", "round trips", "statements", "keyed - unkeyed", "floor", "", "what was sent"]


def rows(counted: Counted) -> list[list]:
    """One row per kind of call; the keyed row judged against the floor of one trip for the claim."""
    table = []
    for kind in (UNKEYED, FRESH, REPLAY):
        judged = ["", "", ""]
        if kind == FRESH:
            extra = counted.trips(FRESH) - counted.trips(UNKEYED)
            judged = [f"{extra:+d}", f"<= +{FLOOR}", "MET" if extra <= FLOOR else "MISSED"]
        table.append(
            [counted.label, kind, counted.trips(kind), counted.statements(kind), *judged, spelled(counted.sent[kind])]
        )
    return table


NOTE = (
    "Counted in a server of its own on a store of its own (benchmarks/instruments/sitecustomize.py wraps "
    "sqlite3's connections, anyio's worker-thread hop and asyncpg's calls from outside), one call of each "
    f"kind after {WARMUP} of each. A round trip is a hop to a worker thread, where SQLite's unit of work "
    "runs and waits for the disk, or a call to the PostgreSQL server; statements SQLite runs on the event "
    "loop (`loop:`, the claim, refused if it would wait, committed with synchronous=NORMAL) take no hop. "
    "The floor is the claim: one trip more than an unkeyed call."
)
