"""Section 5: the 2.x layer over HTTP on each store, side by side: round trip, round trips counted, bytes, instances.

The round trips of memory, SQLite and PostgreSQL are measured in one loop, interleaved
call by call; the SQLite and PostgreSQL stores are shared by four instances each, whose
throughput against one instance closes the section.
"""

import functools
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trips
from concurrency import ROUNDS
from harness import (
    ROUND_TRIP_COLUMNS,
    STORES,
    WARMUP_ROUNDS,
    HttpCaller,
    Postgres,
    Subject,
    check,
    close_all,
    launch_all,
    measured_stores,
    new_store,
    percentile,
    print_table,
    progress,
    records_after,
    room_for,
    round_trip_rows,
    round_trips,
    share_for,
    sqlite_size,
    succeeded,
)
from wire import HttpWire

# Keyed over unkeyed: the layer's own work on memory; on a shared store, its claim and
# record on top of the ledger write the unkeyed call makes in the same store.
KEYED_TARGET = {"memory": 1.05, "SQLite": 1.10, "PostgreSQL": 1.25}
REPLAY_TARGET = 0.80  # a replay skips the tool and its ledger write
INSTANCES = 4
SHARED = ("SQLite", "PostgreSQL")  # the stores several instances share; memory is each process's own


@dataclass
class Store:
    """A store and the instances of the 2.x server on it (one for memory, which no instance shares)."""

    label: str
    url: str
    size: Callable[..., tuple[int, int, int]] | None  # size(vacuum=False): bytes, records, bytes of their outcomes
    wires: list[HttpWire] = field(default_factory=list)
    subject: Subject | None = None  # its round trip, on its first instance
    counted: trips.Counted | None = None
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
    """Section 5: the round trip and its store round trips on each store; bytes and instances on the shared ones."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    labels = measured_stores(postgres)
    try:
        stores = []
        for label in labels:
            url = new_store(label, folder, postgres)
            size = (
                functools.partial(sqlite_size, Path(url.removeprefix("sqlite:")))
                if label == "SQLite"
                else functools.partial(postgres.size, url)
                if label == "PostgreSQL"
                else None
            )
            stores.append(Store(label, url, size))
        progress(f"5. stores: {', '.join(labels)}, {INSTANCES} instances on each shared one")
        records = records_after(calls) + (1 + ROUNDS) * 2 * scale_calls
        room = (*room_for(records), *share_for(records))
        counts = [INSTANCES if store.label in SHARED else 1 for store in stores]
        wires = launch_all(
            *[
                (("2x-http", "--store", store.url, *room), {})
                for store, count in zip(stores, counts, strict=True)
                for _ in range(count)
            ]
        )
        for store, count in zip(stores, counts, strict=True):
            store.wires, wires = wires[:count], wires[count:]
        try:
            measure_stores(stores, calls, clients, scale_calls)
        finally:
            close_all([wire for store in stores for wire in store.wires])
        progress("5. round trips counted: one server of its own on each store, after a warm-up")
        for store in stores:
            store.counted = trips.count(store.label, new_store(store.label, folder, postgres))
    finally:
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    report_stores(stores, postgres, calls, clients, scale_calls)


def measure_stores(stores: list[Store], calls: int, clients: int, scale_calls: int) -> None:
    """Every timed measurement of section 5, each store's interleaved with the others'."""
    shared = [store for store in stores if store.label in SHARED]
    for store in shared:
        store.sizes["empty"] = store.size()
    progress(f"5. round trip: {min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls on each store")
    for store in stores:
        store.subject = Subject(store.label, store.wires[0], KEYED_TARGET[store.label], REPLAY_TARGET)
    round_trips([store.subject for store in stores], calls)
    for store in shared:
        store.sizes["before"] = store.size()
    progress(
        f"5. instances: a warm-up and {ROUNDS} rounds of {scale_calls} keyed calls from {clients} threads "
        f"on 1 and on {INSTANCES} instances of each shared store"
    )
    made = 0
    for number in range(1 + ROUNDS):
        for store in shared:
            for instances in (1, INSTANCES):
                throughput = spread_calls(store.wires[:instances], clients, scale_calls)
                if number > 0:
                    store.throughput.setdefault(instances, []).append(throughput)
        made += 2 * clients * (scale_calls // clients)
    for store in shared:
        store.sizes["after"] = store.size()
        added = store.sizes["after"][1] - store.sizes["before"][1]
        check(added == made, f"{store.label}: {made} fresh keys left {added} new records")
        store.sizes["vacuumed"] = store.size(vacuum=True)


def report_stores(stores: list[Store], postgres: Postgres, calls: int, clients: int, scale_calls: int) -> None:
    """Section 5's four tables; the PostgreSQL rows say why they are missing, if they are."""
    measured = {store.label: store for store in stores}
    missing = f"not measured ({postgres.missing})"

    def each(labels, rows_of, width: int) -> list[list]:
        rows = []
        for label in labels:
            rows += rows_of(measured[label]) if label in measured else [[label, missing, *[""] * (width - 2)]]
        return rows

    print_table(
        f"5a. Stores: round trip over HTTP on the 2.x server, quiet ({calls} calls of each kind, interleaved)",
        ROUND_TRIP_COLUMNS,
        each(STORES, lambda store: round_trip_rows(store.subject), 7),
        "The three stores were measured in one loop, interleaved call by call, each server on a store of its "
        "own. The unkeyed call (charge_unguarded) writes the same ledger in the same store, so on SQLite and "
        "PostgreSQL the ratios are what the claim, the record and the replay cost on top of a call that "
        "already writes. Targets, keyed: memory <= 1.05, SQLite <= 1.10, PostgreSQL <= 1.25; replay <= 0.80.",
    )
    print_table(
        "5b. Stores: round trips of one call of each kind, counted",
        trips.COLUMNS,
        each(STORES, lambda store: trips.rows(store.counted), len(trips.COLUMNS)),
        trips.NOTE,
    )

    def sizes(store: Store) -> list[list]:
        (empty, _, _), (before, rows_before, _) = store.sizes["empty"], store.sizes["before"]
        (after, rows_after, _), (vacuumed, live, outcomes) = store.sizes["after"], store.sizes["vacuumed"]
        added = rows_after - rows_before
        return [
            [
                store.label,
                added,
                f"{before} -> {after}",
                f"{(after - before) / added:.0f}",
                f"{empty} -> {vacuumed}",
                f"{(vacuumed - empty) / live:.0f}",
                f"{outcomes / live:.0f}",
            ]
        ]

    print_table(
        "5c. Shared stores: bytes per stored record",
        [
            "store",
            "records added",
            "bytes before -> after",
            "bytes per record, as written",
            "bytes empty -> after VACUUM",
            "bytes per record, live",
            "of which outcome text",
        ],
        each(SHARED, sizes, 7),
        "SQLite: page_count x page_size of the database file, the WAL's pages included. PostgreSQL: "
        'pg_total_relation_size of idempotency_records: heap, TOAST and both indexes. "As written": the '
        "growth over the keyed calls of 5d, divided by the records they added (one each, checked). "
        '"Live": the store after VACUUM (FULL, for PostgreSQL), less the empty store, divided by every '
        "record it holds. A record is a completed call: key, fingerprint, expiry and its outcome as JSON text.",
    )

    def instances(store: Store) -> list[list]:
        one, many = (percentile(store.throughput[count], 50) for count in (1, INSTANCES))
        return [[store.label, f"{one:.0f}", f"{many:.0f}", f"{many / one:.2f}", clients, os.cpu_count()]]

    print_table(
        f"5d. Shared stores: {INSTANCES} instances on one store against 1 ({scale_calls} fresh keyed calls "
        f"a round from {clients} client threads, median of {ROUNDS} alternated rounds)",
        [
            "store",
            "calls/s, 1 instance",
            f"calls/s, {INSTANCES} instances",
            f"{INSTANCES} / 1",
            "client threads",
            "CPU cores",
        ],
        each(SHARED, instances, 6),
        f"No target. Every process (the instances, the client threads, PostgreSQL) shares these "
        f"{os.cpu_count()} cores, so {INSTANCES} instances can at best add the cores one instance leaves idle; "
        f"beyond that the figure shows what sharing one store costs (SQLite lets one writer in at a time, "
        f"across processes). Every round's charges were counted: exactly one per call.",
    )
