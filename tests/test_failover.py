"""Store loss and failover: what a retry does when the records it relies on are gone.

A record is what turns a retry into a replay. When the store loses it, the retry
runs the tool again; what that costs depends on where the tool's effect lives:

- in the store, in the record's own transaction (the ledger's charge, P17): the charge
  is lost together with its record, so the retry's charge is the only one left;
- outside the store (the outbox's e-mail, counted in its process): the effect stays,
  and the retry's e-mail is a second one.

Quick: a store wiped between an attempt and its retry (SQLite, PostgreSQL).
Slow: a PostgreSQL primary with a streaming replica (tests/replica.sh), the primary
stopped abruptly under a bounded load, the replica promoted, every key retried on new
instances pointed at it; with asynchronous replication and with synchronous (the two
clusters are tests/replica.py's `Cluster`).

Only the servers write to the stores (an operator's wipe aside). Ground truth is read
from the tables with SQL, not asked of the servers, in one helper (`ground_truth`): the
one place to change when a table moves.
"""

import contextlib
import json
import queue
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from replica import Cluster, query, replica_sh
from stores import CHARGED, decisions
from wire import IN_PROGRESS, ROOT, error_type, start, text_of

# The ledger over both transports, the outbox over stdio.
# serial: load on a primary stopped mid-run, so CI runs it alone.
pytestmark = [pytest.mark.targets("2x-stdio", "2x-http"), pytest.mark.serial]

# ----------------------------------------------------------------------------
# Ground truth, read from the store's tables directly
# ----------------------------------------------------------------------------

# The tables read here: the layer's records and the demo's ledger. If either moves
# (a schema upgrade), this is the one place to change.
RECORDS = "SELECT key, outcome FROM idempotency_records"
LEDGER = "SELECT balance, charges FROM ledger"
# The ledger is the demo's own table, made by the ledger server; the outbox's store has none.
HAS_LEDGER = {
    "sqlite": "SELECT count(*) FROM sqlite_schema WHERE name = 'ledger'",
    "postgresql": "SELECT to_regclass('ledger') IS NOT NULL",
}


def ground_truth(url: str) -> tuple[dict, dict]:
    """The ledger {"balance", "charges"} (zeros if the store has none) and every record,
    {client key: outcome text, None while running}, read in one snapshot of the store at `url`."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None)) as db:
            db.execute("BEGIN")
            row = db.execute(LEDGER).fetchone() if db.execute(HAS_LEDGER["sqlite"]).fetchone()[0] else None
            rows = db.execute(RECORDS).fetchall()
            db.execute("COMMIT")
    else:
        import anyio
        import asyncpg

        async def fetch():
            db = await asyncpg.connect(url)
            try:
                async with db.transaction(isolation="repeatable_read", readonly=True):
                    row = await db.fetchrow(LEDGER) if await db.fetchval(HAS_LEDGER["postgresql"]) else None
                    return row, [tuple(row) for row in await db.fetch(RECORDS)]
            finally:
                await db.close()

        row, rows = anyio.run(fetch)
    ledger = {"balance": 0, "charges": 0} if row is None else {"balance": row[0], "charges": row[1]}
    # The store keys a record by the principal and the client's key, as a JSON array (K2).
    return ledger, {json.loads(stored)[-1]: outcome for stored, outcome in rows}


def postgres_admin(url: str, statement: str) -> None:
    """One statement on the PostgreSQL server of `url`, from its maintenance database."""
    import anyio
    import asyncpg

    async def run():
        db = await asyncpg.connect(url.rsplit("/", 1)[0] + "/postgres")
        try:
            await db.execute(statement)
        finally:
            await db.close()

    anyio.run(run)


# ----------------------------------------------------------------------------
# Quick: the store wiped between an attempt and its retry
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def wiped_aside(url: str, tmp_path: Path):
    """Wipe the store at `url` (its server stopped): an empty store answers there from now on.
    The old content is kept aside, and its URL yielded, only so the test can count what it held."""
    if url.startswith("sqlite:"):
        path, aside = Path(url.removeprefix("sqlite:")), tmp_path / "wiped"
        aside.mkdir()
        for part in path.parent.glob(path.name + "*"):  # the file, and its -wal and -shm if any
            part.rename(aside / part.name)
        yield f"sqlite:{aside / path.name}"
        return
    name = url.rsplit("/", 1)[1]
    postgres_admin(url, f"ALTER DATABASE {name} RENAME TO {name}_wiped")
    postgres_admin(url, f"CREATE DATABASE {name}")  # the fixture drops this one
    try:
        yield url.rsplit("/", 1)[0] + f"/{name}_wiped"
    finally:
        postgres_admin(url, f"DROP DATABASE {name}_wiped WITH (FORCE)")


def test_a_retry_after_the_store_was_wiped_runs_the_tool_again(store_url, tmp_path):
    """The record is the only memory of a key: with the store gone, the retry is a first attempt.

    The charge is answered, its server stopped, the store wiped (the SQLite file deleted,
    the PostgreSQL database dropped and made again; each kept aside to be counted), a
    server started again on the same URL, and the charge retried with the same key: it
    is claimed and charged anew, not replayed. Two charges now exist for one key, one in
    each store; the client saw two answers that look alike and could not tell.
    """
    first = start("2x-stdio", "--store", store_url)
    try:
        answered = first.charge(100, key="order-1")
    finally:
        first.close()
    assert text_of(answered) == "Charged 100. New balance: 100"

    with wiped_aside(store_url, tmp_path) as old_store:
        again = start("2x-stdio", "--store", store_url)
        try:
            retried = again.charge(100, key="order-1")
            log = again.log()
        finally:
            again.close()
        assert error_type(retried) is None, retried
        # Run again, not replayed: the new store had no record to replay.
        assert "claimed: key='order-1'" in log and "replayed: key='order-1'" not in log, log
        assert text_of(retried) == "Charged 100. New balance: 100"  # the new ledger's first charge
        old_ledger, old_records = ground_truth(old_store)
        new_ledger, new_records = ground_truth(store_url)
    assert old_ledger == new_ledger == {"balance": 100, "charges": 1}
    assert set(old_records) == set(new_records) == {"order-1"}  # one key, charged in both: twice


# ----------------------------------------------------------------------------
# Slow: a primary and its streaming replica; the primary dies under load
# ----------------------------------------------------------------------------

MAIL_SERVER = [str(ROOT / "retry" / "mail_server.py")]
KEYS = 300  # keyed charges, and as many keyed e-mails
THREADS = 3  # clients, each one key at a time: its charge, then its e-mail
CUT_OFF_AT = 120  # keys answered when the replica stops receiving (the cut-off modes)
CRASH_AT = 220  # keys answered when the primary is stopped, the other clients' calls in flight
# Synchronous and cut off, no call is answered any more (each commit waits for the replica):
# the primary is stopped this long after the cut-off, its clients' calls waiting.
STALLED = 1.0  # seconds
LEASE = 2.0  # seconds: a claim that outlived the crash on the replica is taken over soon after
# The modes: asynchronous replication as it runs on one machine (the replica a few
# milliseconds behind at most); asynchronous with the replica cut off from the primary
# part-way (a lagging or partitioned replica: what asynchronous replication allows at
# any moment); synchronous, the replica named in synchronous_standby_names; and
# synchronous with the same cut-off, to show that the guarantee does not rest on a
# replica that happens to keep up. And asynchronous with the replica's replay paused
# instead of cut off, to show that a replica behind in replay only is not behind at all.
MODES = ["async", "async-cut-off", "async-replay-paused", "sync", "sync-cut-off"]


@pytest.fixture
def cluster(request):
    """A primary with a streaming replica, in the mode the test is parametrized with; both stopped
    and their folder deleted at the end, whatever happened."""
    made = None
    try:
        made = Cluster(request.param)
        made.wait_until_streaming()
        yield made
    finally:
        if made is not None:
            made.stop()


def succeeded(call) -> dict | None:
    """The answer of a call that was answered with a result; None for an error, a dropped connection, a silence."""
    try:
        reply = call()
    except (OSError, ValueError, queue.Empty):  # the connection dropped, or nothing came back in time
        return None
    return reply if "result" in reply and not reply["result"].get("isError") else None


class Load:
    """KEYS keys from THREADS clients, one key at a time each: key i charges i + 1 on ledger instance
    i % 2, then sends e-mail i through the outbox. `at_answered` maps a count of answered keys to
    what the client whose answer made that count does next (cut the replica off, stop the primary),
    while the other clients' calls are in flight."""

    def __init__(self, ledgers: list, outbox, at_answered: dict):
        self.ledgers, self.outbox, self.at_answered = ledgers, outbox, at_answered
        self.lock = threading.Lock()
        self.mail_lock = threading.Lock()  # the outbox speaks stdio: one pipe, one request on it at a time
        self.next_key = self.answered = 0
        self.sent: dict[str, float] = {}  # keys whose call went out: when
        self.acknowledged: dict[str, dict] = {}  # key: the result its client was answered with
        self.crashed = threading.Event()  # set once the primary is stopped: the clients stop taking keys

    def run(self) -> None:
        with ThreadPoolExecutor(THREADS) as pool:
            for client in [pool.submit(self.client) for _ in range(THREADS)]:
                client.result()

    def take(self) -> int | None:
        with self.lock:
            if self.crashed.is_set() or self.next_key >= KEYS:
                return None
            self.next_key += 1
            return self.next_key - 1

    def client(self) -> None:
        while (i := self.take()) is not None:
            self.sent[f"charge-{i}"] = time.monotonic()
            charged = succeeded(lambda: self.ledgers[i % len(self.ledgers)].charge(i + 1, key=f"charge-{i}"))
            if charged is None:
                continue  # no answer: this client retries the key after the failover
            self.acknowledged[f"charge-{i}"] = charged
            with self.mail_lock:
                if self.crashed.is_set():
                    continue
                self.sent[f"mail-{i}"] = time.monotonic()
                mailed = succeeded(lambda: self.outbox.call("send_email", e_mail(i), key=f"mail-{i}"))
            if mailed is None:
                continue
            self.acknowledged[f"mail-{i}"] = mailed
            with self.lock:
                self.answered += 1
                then = self.at_answered.get(self.answered)
            if then is not None:
                then()


def e_mail(i: int) -> dict:
    return {"to": f"customer-{i}@example.com", "subject": f"Receipt {i}", "body": f"You were charged {i + 1}."}


def emails_sent(outbox) -> int:
    """The outbox process's own count of the e-mails it sent (an unkeyed call: the store is not asked)."""
    return json.loads(text_of(outbox.call("outbox", {})))["email"]


def completed(records: dict, kind: str) -> dict:
    """The completed records of one kind of key ("charge" or "mail"): {key: outcome}."""
    return {key: outcome for key, outcome in records.items() if key.startswith(kind + "-") and outcome is not None}


def check_one_charge_per_key(ledger: dict, records: dict, keys: set) -> None:
    """The ledger holds exactly one charge per key in `keys`, each the one its record reports: sorted
    by the balance each record shows, the balance climbs from 0 by each key's own amount, in as many
    steps as the ledger counts. A lost charge, or a second one for a key, would break the chain."""
    charges = completed(records, "charge")
    assert set(charges) == keys, f"keys with no completed charge: {sorted(keys - set(charges))[:5]}"
    shown = {
        key: tuple(map(int, CHARGED.fullmatch(json.loads(outcome)["result"]["content"][0]["text"]).groups()))
        for key, outcome in charges.items()
    }
    balance = 0
    for key, (amount, after) in sorted(shown.items(), key=lambda item: item[1][1]):
        assert amount == int(key.split("-")[1]) + 1 and after == balance + amount, f"{key}: a charge with no record"
        balance = after
    assert ledger == {"balance": balance, "charges": len(keys)}, f"{ledger}: charges no record accounts for"


def retry_every_key(ledgers: list, outbox) -> dict:
    """Every key again, charge and e-mail, on the instances pointed at the promoted replica; each
    must now get a result (a claim that outlived the crash is past its lease). {key: its answer}."""
    mail_lock = threading.Lock()

    def again(i: int) -> list[tuple[str, dict]]:
        answers = []
        for key, call in (
            (f"charge-{i}", lambda: ledgers[i % len(ledgers)].charge(i + 1, key=f"charge-{i}")),
            (f"mail-{i}", lambda: outbox.call("send_email", e_mail(i), key=f"mail-{i}")),
        ):
            with mail_lock if key.startswith("mail") else contextlib.nullcontext():
                reply = call()
                if error_type(reply) == IN_PROGRESS:  # a claim from before the crash, its lease not yet over
                    time.sleep(LEASE)
                    reply = call()
            assert "result" in reply and not reply["result"].get("isError"), f"{key} after the failover: {reply}"
            answers.append((key, reply))
        return answers

    with ThreadPoolExecutor(THREADS) as pool:
        return dict(answer for answers in pool.map(again, range(KEYS)) for answer in answers)


@contextlib.contextmanager
def servers(ledger_url: str, outbox_url: str):
    """Two ledger instances (HTTP) and one outbox (stdio) on the given stores, stopped at the end."""
    with ThreadPoolExecutor(3) as pool:
        starting = [pool.submit(start, "2x-http", "--store", ledger_url, "--lease", str(LEASE)) for _ in range(2)]
        starting.append(
            pool.submit(start, "2x-stdio", "--store", outbox_url, "--lease", str(LEASE), server=MAIL_SERVER)
        )
    started = [future.result() for future in starting if future.exception() is None]
    try:
        failed = [future.exception() for future in starting if future.exception() is not None]
        if failed:
            raise failed[0]
        yield started[:2], started[2]
    finally:
        for wire in started:
            wire.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("cluster", MODES, indirect=True)
def test_after_a_failover_every_key_charges_once_and_only_an_outside_effect_can_repeat(cluster, capsys):
    """The primary is stopped abruptly under load, the replica promoted, every key retried on it.

    In the store (the ledger, P17), a charge and its record are lost together or kept
    together: the retry of a lost key charges it anew, and every key ends with one charge.
    Outside the store (the outbox), an e-mail whose record was lost is sent a second time.
    Synchronous replication loses no record of an answered call, so repeats nothing answered.
    """
    ledger_db, outbox_db = cluster.database(cluster.primary, "postgres"), cluster.database(cluster.primary, "outbox")
    query(cluster.primary, "CREATE DATABASE outbox")  # the outbox's own store, replicated like the ledger's
    crash: dict = {}

    def stop_the_primary() -> None:
        replica_sh("crash", cluster.folder)  # pg_ctl stop -m immediate, the other clients' calls in flight
        crash["at"] = time.monotonic()
        load.crashed.set()

    paused: dict = {}

    def pause_the_replay() -> None:
        cluster.pause_replay()
        paused["answered"] = set(load.acknowledged)

    def stop_the_primary_once_the_paused_replica_has_everything() -> None:
        # Whatever was answered by now is in WAL the replica has received, but not applied.
        paused["answered before the stop"] = set(load.acknowledged)
        paused["bytes unapplied"] = cluster.received_everything()
        stop_the_primary()

    def cut_off_then_stop_the_primary() -> None:
        cluster.cut_off_the_replica()
        threading.Timer(STALLED, stop_the_primary).start()  # nothing more is answered to count up to

    events = {CRASH_AT: stop_the_primary}
    if cluster.name == "async-cut-off":
        events[CUT_OFF_AT] = cluster.cut_off_the_replica
    if cluster.name == "sync-cut-off":
        events = {CUT_OFF_AT: cut_off_then_stop_the_primary}
    if cluster.name == "async-replay-paused":
        events = {CUT_OFF_AT: pause_the_replay, CRASH_AT: stop_the_primary_once_the_paused_replica_has_everything}
    with servers(ledger_db, outbox_db) as (ledgers, outbox):
        load = Load(ledgers, outbox, events)
        began = time.monotonic()
        load.run()
        loaded = time.monotonic() - began
        assert "at" in crash, "the load ended before the primary was stopped"
        sent_before = emails_sent(outbox)
    replica_sh("promote", cluster.folder)
    ledger_db, outbox_db = cluster.database(cluster.replica, "postgres"), cluster.database(cluster.replica, "outbox")
    promoted = {"charge": ground_truth(ledger_db), "mail": ground_truth(outbox_db)}

    with servers(ledger_db, outbox_db) as (ledgers, outbox):
        time.sleep(max(0.0, crash["at"] + LEASE + 0.5 - time.monotonic()))
        retried = retry_every_key(ledgers, outbox)
        sent_after = emails_sent(outbox)
        seen = decisions(*ledgers, outbox)
    after = ground_truth(ledger_db)
    old = replica_sh("restart-old", cluster.folder, cluster.old_port).strip()  # what the dead primary had committed
    on_primary = {
        "charge": ground_truth(cluster.database(old, "postgres")),
        "mail": ground_truth(cluster.database(old, "outbox")),
    }

    figures, re_runs = {}, {}
    for kind in ("charge", "mail"):
        (ledger, records), (old_ledger, old_records) = promoted[kind], on_primary[kind]
        kept, committed = completed(records, kind), completed(old_records, kind)
        acknowledged = {key for key in load.acknowledged if key.startswith(kind)}
        re_run = re_runs[kind] = {key for key in retried if key.startswith(kind) and seen["recorded", key]}
        if kind == "charge":  # P17 on both sides of the failover: charges and records lost together
            check_one_charge_per_key(ledger, records, set(kept))
            check_one_charge_per_key(old_ledger, old_records, set(committed))
        # A key runs again exactly when the promoted replica held no completed record of it.
        assert re_run == {key for key in retried if key.startswith(kind)} - set(kept)
        for key in acknowledged & set(kept):  # a kept record replays what its client was answered
            assert retried[key]["result"] == load.acknowledged[key]["result"], key
        figures[kind] = {
            "answered": len(acknowledged),
            "completed on the primary": len(committed),
            "completed and lost": len(set(committed) - set(kept)),
            "answered and lost": len(acknowledged - set(kept)),
            "records of any state lost": len({key for key in old_records if key.startswith(kind)} - set(records)),
            "re-run": len(re_run),
        }
    check_one_charge_per_key(*after, {f"charge-{i}" for i in range(KEYS)})  # exactly one charge per key
    twice = sent_before + sent_after - KEYS  # every key's e-mail went out at least once
    answered_twice = len(re_runs["mail"] & set(load.acknowledged))  # sent, answered, and sent again
    assert sent_after == figures["mail"]["re-run"]

    # Outside the store, a lost record repeats its effect: for each answered e-mail whose
    # record was lost, and for an e-mail in flight at the crash that went out unrecorded.
    assert twice >= answered_twice == figures["mail"]["answered and lost"]
    in_flight = {key for key in load.sent if key.startswith("mail")} - set(load.acknowledged)
    assert twice - answered_twice <= len(in_flight)
    if cluster.mode == "sync":  # nothing answered is lost, so nothing answered is repeated
        assert figures["charge"]["answered and lost"] == figures["mail"]["answered and lost"] == answered_twice == 0
    if cluster.name == "sync-cut-off":  # each commit waited for the replica: no call sent since was answered
        assert not [key for key in load.acknowledged if load.sent[key] > cluster.cut_off_at]
    if cluster.name == "async-cut-off":  # the replica fell behind: answered calls lost, e-mails repeated
        assert figures["charge"]["answered and lost"] > 0 and figures["mail"]["answered and lost"] > 0
        assert answered_twice > 0
    if cluster.name == "async-replay-paused":  # promotion applied all it had received: nothing of it lost
        applied_at_promotion = paused["answered before the stop"] - paused["answered"]
        assert paused["bytes unapplied"] > 0 and applied_at_promotion, "the replica was not behind in replay"
        kept = set(completed(promoted["charge"][1], "charge")) | set(completed(promoted["mail"][1], "mail"))
        assert not paused["answered before the stop"] - kept
        figures["paused"] = {
            "calls answered during the pause": len(applied_at_promotion),
            "bytes unapplied at the stop": paused["bytes unapplied"],
        }
    with capsys.disabled():
        print(
            f"\n[failover, {cluster.name}] {KEYS} keys, {THREADS} clients, primary stopped after "
            f"{loaded:.1f} s of load; charges {figures['charge']}; "
            f"e-mails {figures['mail']}; e-mails sent twice: {twice} ({answered_twice} of them answered before "
            f"the crash); ledger after the retries: {after[0]['charges']} charges, one per key"
            f"{''.join(f'; {name}: {value}' for name, value in figures.get('paused', {}).items())}",
            end="",
        )
