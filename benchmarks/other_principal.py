"""Section 9: does a key that another principal used answer any differently, or any slower? (K2, P21)

The store is consulted before the SDK validates the arguments (README, "Look up, then
validate"). That order could leak only if a lookup told Bob something about Alice's
keys, by its answer or by its timing. The answers are pinned byte for byte by
tests/test_authorization.py; this section times them. On each store, behind OAuth,
Alice first completes one keyed charge per round; then, round by round and in a
shuffled order, Bob sends a new keyed charge under the key Alice used in that round,
and another under a key nobody used. Both are his own executions (the record's key
holds his issuer and subject); the ratio of their medians is what Alice's use shows him.
"""

import random
import shutil
import tempfile
import uuid
from pathlib import Path

from harness import (
    SEED,
    WARMUP_ROUNDS,
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
    room_for,
    share_for,
    timed_call,
)
from oauth import RESOURCE, Issuer, bearer
from shared_stores import KEYED_TARGET, REPLAY_TARGET

USED, UNUSED = "under a key Alice used", "under a key nobody used"


def other_principal(calls: int, postgres: Postgres) -> None:
    """Section 9: Bob's keyed calls under Alice's used keys against fresh ones, every store in one loop."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    stores = measured_stores(postgres)
    rounds = min(WARMUP_ROUNDS, calls) + calls
    issuer = Issuer()
    try:
        progress(f"9. another principal's key: {', '.join(stores)} behind OAuth, {rounds} rounds of 2 calls")
        oauth = ("--issuer", issuer.url, "--resource", RESOURCE)
        alice, bob = bearer(issuer.token("alice")), bearer(issuer.token("bob"))
        room = (*room_for(3 * rounds), *share_for(2 * rounds))  # Alice's records and Bob's, each within a share
        servers = [("2x-http", "--store", new_store(store, folder, postgres), *room, *oauth) for store in stores]
        wires = launch_all(*[(server, {"headers": alice}) for server in servers])
        try:
            subjects = [
                Subject(store, wire, KEYED_TARGET[store], REPLAY_TARGET)
                for store, wire in zip(stores, wires, strict=True)
            ]
            alices_keys = [str(uuid.uuid4()) for _ in range(rounds)]
            for subject in subjects:
                for key in alices_keys:  # Alice's records, completed before Bob sends a thing
                    timed_call(subject, "charge_guarded", key)
                subject.wire.extra_headers = bob
            samples = {(subject.label, kind): [] for subject in subjects for kind in (USED, UNUSED)}
            rng = random.Random(SEED)
            for number, key in enumerate(alices_keys):
                for subject in rng.sample(subjects, k=len(subjects)):
                    for kind in rng.sample((USED, UNUSED), k=2):
                        latency = timed_call(subject, "charge_guarded", key if kind == USED else str(uuid.uuid4()))
                        if number >= rounds - calls:
                            samples[subject.label, kind].append(latency / 1000)
            for subject in subjects:  # every call of Bob's executed: Alice's use of a key ran nothing for him
                subject.caller.close()
                ledger = subject.wire.ledger()
                check(ledger["charges"] == 3 * rounds, f"{subject.label}: {3 * rounds} charges expected, {ledger}")
        finally:
            close_all(wires)
    finally:
        issuer.close()
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    rows = [
        [
            store,
            *(f"{percentile(samples[store, kind], 50):.0f}" for kind in (USED, UNUSED)),
            f"{percentile(samples[store, USED], 50) / percentile(samples[store, UNUSED], 50):.3f}",
        ]
        for store in stores
    ]
    print_table(
        f"9. Another principal's key (K2, P21): Bob's keyed calls under keys Alice used, against keys nobody "
        f"used ({calls} of each, interleaved, behind OAuth)",
        ["store", f"median µs, {USED}", f"median µs, {UNUSED}", "used / unused"],
        rows,
        "Each store on a server of its own, trusting the real issuer. Alice completed one keyed charge per "
        "round first; Bob's two calls of each round were both executions of his own (the ledger counts every "
        "one), in a shuffled order. A ratio within the few percent two alike medians differ by on shared "
        "cores says a lookup shows Bob nothing of Alice's keys by its timing, as their answers show nothing "
        "(tests/test_authorization.py, byte for byte).",
    )
