"""Section 8: what a principal's share (P9') costs a keyed call, side by side in one loop.

The share is checked inside the claim, in the statement or transaction that takes the
key, so it adds no store round trip (5b counts them on this code); what it adds on
SQLite and PostgreSQL is a read of the principal's count of records (schema version 4),
and a walk of its live records on the share index only once that count exceeds the
share (the memory store likewise walks only then). So each store runs two servers: one
whose principal holds nothing when the timed calls begin, and one whose principal already
holds `held` live records (bench.py --held, default 900: most of the default share of
1,000), made by keyed calls of the read-only tool (records, no charges). The ratio of the
two keyed calls that execute is what the records held cost a claim at that depth; the
replay never walks.
"""

import shutil
import tempfile
import uuid
from pathlib import Path

from harness import (
    FRESH,
    REPLAY,
    UNKEYED,
    WARMUP_ROUNDS,
    Postgres,
    Subject,
    check,
    close_all,
    launch_all,
    measured_stores,
    new_store,
    print_table,
    progress,
    records_after,
    round_trips,
)
from shared_stores import KEYED_TARGET, REPLAY_TARGET


def share_cost(calls: int, held: int, postgres: Postgres) -> None:
    """Section 8: on each store, a principal holding nothing against one holding `held` records, in one loop."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    stores = measured_stores(postgres)
    # Room for every record either server makes, so that neither meets its share or the bound.
    records = records_after(calls) + held
    room = ("--max-records", str(records + 1), "--max-records-per-principal", str(records + 1))
    try:
        progress(f"8. share: {2 * len(stores)} servers, {held} records held first, then {calls} rounds of 3 calls")
        chosen = [(store, holding) for store in stores for holding in (0, held)]
        servers = [("2x-http", "--store", new_store(store, folder, postgres), *room) for store, _ in chosen]
        wires = launch_all(*[(server, {}) for server in servers])
        try:
            for (_, holding), wire in zip(chosen, wires, strict=True):
                for _ in range(holding):
                    check("result" in wire.call("get_balance", {}, key=str(uuid.uuid4())), "a keyed read failed")
            subjects = {
                (store, holding): Subject(f"{store}, {holding} held", wire, KEYED_TARGET[store], REPLAY_TARGET)
                for (store, holding), wire in zip(chosen, wires, strict=True)
            }
            round_trips(list(subjects.values()), calls)
        finally:
            close_all(wires)
    finally:
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for store in stores:
        empty, holding = subjects[store, 0], subjects[store, held]
        rows.append(
            [
                store,
                *(f"{subject.median(FRESH) / subject.median(UNKEYED):.3f}" for subject in (empty, holding)),
                *(f"{holding.median(kind) / empty.median(kind):.3f}" for kind in (UNKEYED, FRESH, REPLAY)),
            ]
        )
    print_table(
        f"8. A principal's share (P9'): holding nothing against holding {held} live records "
        f"({calls} calls of each kind, {min(WARMUP_ROUNDS, calls)} warm-up rounds, every server in one loop)",
        [
            "store",
            "executes / unkeyed, holding 0",
            f"executes / unkeyed, holding {held}",
            f"{held} / 0: unkeyed",
            f"{held} / 0: executes",
            f"{held} / 0: replay",
        ],
        rows,
        "Each server ran on a store of its own over HTTP, with its share and bound set above every record it "
        f"made. The {held} records were made before the timed calls by keyed calls of get_balance; the timed "
        "keyed calls that execute add one record each to both servers alike. Above 1, holding records made "
        "that call slower; the claim walks the share index only once the principal's records exceed its share.",
    )
