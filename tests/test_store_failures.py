"""P18, P23: the shared store under production faults, on real server processes over HTTP.

A store that fails under a keyed call (another process holds the SQLite file past
the wait, the disk fills up) never has its failure recorded as the tool's outcome:
the unit of work runs whole or not at all, the claim is given back, and the client
gets a retryable rejection, `idempotency_store_unavailable`; its retry charges once.

A tool slower than its lease, retried all along, completes exactly once (P18: the
first completion wins; a takeover's later one is fenced off).

The slow set freezes an instance (SIGSTOP, as a paused VM) at each phase of a keyed
call, beside tests/test_crashes.py's SIGKILL runs: other keys wait a bounded time,
the frozen key is taken over after one lease, and once the instance thaws (SIGCONT)
the ledger still holds exactly the recorded charges.
"""

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from stores import CHARGED, audit, decisions, read_store
from wire import IN_PROGRESS, REPLY_TIMEOUT, error_type, start, text_of

# serial: SIGSTOP, and how long other keys wait meanwhile, measured, so CI runs it alone.
pytestmark = [pytest.mark.targets("2x-http"), pytest.mark.serial]

FAULTS = Path(__file__).resolve().parent / "faults"
STORE_UNAVAILABLE = "idempotency_store_unavailable"  # as the wire carries it (P5)


# ----------------------------------------------------------------------------
# Quick: a unit of work that cannot take the SQLite file runs nothing
# ----------------------------------------------------------------------------

LEASE = 3.0  # seconds; the store waits a third of it, one second, for the file
HOLD = 2.5  # seconds another process holds the file's write lock: past that wait

# Another process (a migration, a VACUUM, a backup) takes the write lock, says so, holds it.
HOLD_THE_FILE = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


def test_a_keyed_call_whose_write_cannot_take_the_sqlite_file_is_not_recorded_and_its_retry_charges_once(tmp_path):
    """Issue 16, finding 1: the unit of work ran its statements outside any transaction when its
    BEGIN timed out, and the failure was recorded as the tool's outcome."""
    path = tmp_path / "store.db"
    wire = start("2x-http", "--store", f"sqlite:{path}", "--lease", str(LEASE), "--charge-delay", "1")
    try:
        call = wire.send_call("charge_guarded", {"amount": 100}, key="order-1")
        wire.wait_for_log("claimed: key='order-1'")  # the tool sleeps a second, then writes
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_THE_FILE, str(path), str(HOLD)], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout.readline() == "holding\n"
        refused = wire.reply(call)
        holder.wait(REPLY_TIMEOUT)

        assert refused["error"]["data"] == {"type": STORE_UNAVAILABLE, "retryable": True, "idempotencyKey": "order-1"}
        assert read_store(f"sqlite:{path}")[:2] == ({"balance": 0, "charges": 0}, {})  # no charge, no record
        retried = wire.charge(100, key="order-1")
        assert text_of(retried) == "Charged 100. New balance: 100"
        assert wire.charge(100, key="order-1")["result"] == retried["result"]
        assert audit(f"sqlite:{path}") == ({"order-1": (100, 100)}, set())
    finally:
        wire.close()


DISK = 256 * 1024  # bytes any file of the server may reach: its store fills up within a few calls
CALLS_ON_A_FULL_DISK = 60  # at most; the test goes on a few calls past the first failure


def test_a_full_disk_is_never_recorded_as_an_outcome_and_every_key_charges_once_when_there_is_room(
    tmp_path, monkeypatch
):
    """Issue 16, finding 1: a store that cannot write ("database or disk is full") answers a keyed
    call with a retryable rejection, never a recorded failure; once there is room, each key charges once."""
    url = f"sqlite:{tmp_path / 'store.db'}"
    monkeypatch.setenv("PYTHONPATH", str(FAULTS))
    monkeypatch.setenv("SEP3182_FILE_SIZE_LIMIT", str(DISK))
    full = start("2x-http", "--store", url, "--lease", "1")
    answers = {}
    try:
        full.wait_for_log(f"faults: files capped at {DISK} bytes")
        for i in range(CALLS_ON_A_FULL_DISK):
            response = full.charge(i + 1, key=f"order-{i}")
            answers[f"order-{i}"] = "charged" if "result" in response else error_type(response)
            assert answers[f"order-{i}"] in ("charged", STORE_UNAVAILABLE), response
            if list(answers.values()).count(STORE_UNAVAILABLE) == 5:
                break
    finally:
        full.close()
    assert STORE_UNAVAILABLE in answers.values(), "the disk never filled up"
    audit(url)  # whatever the full disk left: no charge without its record, none twice

    monkeypatch.delenv("SEP3182_FILE_SIZE_LIMIT")
    roomy = start("2x-http", "--store", url, "--lease", "1")
    try:
        time.sleep(1.2)  # a claim the full disk could not give back is freed by its lease
        for i, key in enumerate(answers):
            response = roomy.charge(i + 1, key=key)
            assert CHARGED.fullmatch(text_of(response))[1] == str(i + 1), response
    finally:
        roomy.close()
    completed, running = audit(url)
    assert not running and sorted(completed) == sorted(answers)


# ----------------------------------------------------------------------------
# Quick: a tool slower than its lease, retried all along, runs once
# ----------------------------------------------------------------------------

SLOW_LEASE = 2.0  # seconds
SLOW_TOOL = 1.5 * SLOW_LEASE
RETRY_EVERY = 0.6 * SLOW_LEASE
RETRIES = 8  # at most: a livelock is caught after ten seconds


def test_a_tool_that_takes_one_and_a_half_leases_retried_every_six_tenths_completes_exactly_once(store_url):
    """P18': the holder renews its lease while the tool runs, so no retry takes the key over: each is in
    progress until the original completes, and the tool runs once. (Issue 16, finding 3, before renewal:
    each takeover fenced the run before it, so the tool never completed.)"""
    wire = start("2x-http", "--store", store_url, "--lease", str(SLOW_LEASE), "--charge-delay", str(SLOW_TOOL))
    try:
        sent = [wire.send_call("charge_guarded", {"amount": 100}, key="slow")]
        with ThreadPoolExecutor(RETRIES + 1) as pool:
            replies = [pool.submit(wire.reply, sent[0])]
            while not any(done.done() and "result" in done.result() for done in replies) and len(sent) <= RETRIES:
                time.sleep(RETRY_EVERY)
                sent.append(wire.send_call("charge_guarded", {"amount": 100}, key="slow"))
                replies.append(pool.submit(wire.reply, sent[-1]))
            answers = [reply.result() for reply in replies]  # every call ends: run, replayed or refused

        results = [answer["result"] for answer in answers if "result" in answer]
        assert results, f"no retry of {len(sent)} ever got the outcome: {[error_type(a) for a in answers]}"
        assert "result" in answers[0], f"the original was fenced off: {answers[0]}"
        assert all(result == results[0] for result in results)
        assert all(error_type(answer) == IN_PROGRESS for answer in answers if "result" not in answer)
        seen = decisions(wire)
        assert (seen["claimed", "slow"], seen["recorded", "slow"]) == (1, 1), "a retry took the live run over"
        assert len(sent) > 3, "no retry was sent past the lease"
        assert audit(store_url) == ({"slow": (100, 100)}, set())
    finally:
        wire.close()


# ----------------------------------------------------------------------------
# Slow: an instance frozen (SIGSTOP) at each phase of a keyed call
# ----------------------------------------------------------------------------

PHASES = ["before-claim-commit", "after-claim", "after-charge", "after-commit"]
FROZEN_LEASE = 3.0  # seconds: the stores wait a third of it for a lock, one second
OTHER_KEYS = 6  # new keys sent to the healthy instance while the other is frozen
# What the frozen instance holds, by store and phase: nothing, or the lock every charge
# needs. SQLite has one writer at a time and no way to take the lock from a frozen
# one; PostgreSQL ends a session idle inside a transaction after a lease and a wait.
HOLDS_THE_WRITERS = {("sqlite", "before-claim-commit"), ("sqlite", "after-charge"), ("postgresql", "after-charge")}


def retry_until_charged(wire, key: str, amount: int, seconds: float) -> tuple[str, dict]:
    """Retry `key` while the store is unavailable or the key in progress, for `seconds` at most."""
    deadline = time.monotonic() + seconds
    while True:
        response = wire.charge(amount, key=key)
        if "result" in response or time.monotonic() > deadline:
            return ("charged" if "result" in response else error_type(response)), response
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("phase", PHASES)
def test_instance_frozen_at_each_phase_holds_up_other_keys_a_bounded_time_and_charges_nothing_twice(
    phase, store_url, monkeypatch, capsys
):
    """P18, P23, issue 16 finding 2: a frozen peer (a paused VM) left every other key waiting, unbounded."""
    kind = store_url.split(":")[0]
    server_args = ("--store", store_url, "--lease", str(FROZEN_LEASE))
    healthy = start("2x-http", *server_args)
    monkeypatch.setenv("PYTHONPATH", str(FAULTS))
    monkeypatch.setenv("SEP3182_STOP_AT", phase)
    frozen = start("2x-http", *server_args)
    amounts = {"frozen": 1000, **{f"other-{i}": i + 1 for i in range(OTHER_KEYS)}}
    waits, refused = [], 0
    try:
        call = frozen.send_call("charge_guarded", {"amount": amounts["frozen"]}, key="frozen")
        frozen.wait_for_log(f"faults: SIGSTOP at {phase}")
        time.sleep(0.2)  # the signal is delivered
        stopped_at = time.monotonic()

        for i in range(OTHER_KEYS):  # other keys, while it is frozen: each answered, in a bounded time
            began = time.monotonic()
            response = healthy.charge(amounts[f"other-{i}"], key=f"other-{i}")
            waits.append(time.monotonic() - began)
            assert "result" in response or error_type(response) == STORE_UNAVAILABLE, response
            refused += "result" not in response
        assert max(waits) < FROZEN_LEASE, f"another key waited {max(waits):.1f} s on a frozen instance"
        if (kind, phase) not in HOLDS_THE_WRITERS:
            assert refused == 0, f"{refused} other keys refused while an instance held nothing"

        # Its own key: after one lease (and, on PostgreSQL, the end of its idle session), another
        # instance runs or replays it; on SQLite a frozen writer holds the file until it thaws.
        if kind == "postgresql" or (kind, phase) not in HOLDS_THE_WRITERS:
            time.sleep(max(0.0, stopped_at + FROZEN_LEASE * 4 / 3 + 0.5 - time.monotonic()))
            outcome, response = retry_until_charged(healthy, "frozen", amounts["frozen"], FROZEN_LEASE)
            assert outcome == "charged", response
            took = time.monotonic() - stopped_at
        else:
            took = None
        frozen.process.send_signal(signal.SIGCONT)
        late = frozen.reply(call)  # the thawed call's own answer: its outcome, or told to retry
        assert "result" in late or error_type(late) in (IN_PROGRESS, STORE_UNAVAILABLE), late

        for key, amount in amounts.items():  # after the thaw, everything completes, once
            outcome, response = retry_until_charged(healthy, key, amount, FROZEN_LEASE * 2)
            assert outcome == "charged", (key, response)
    finally:
        frozen.process.send_signal(signal.SIGCONT)
        frozen.close()
        healthy.close()

    completed, running = audit(store_url)  # no double charge, no charge without its record
    assert not running and {key: amount for key, (amount, _) in completed.items()} == amounts
    with capsys.disabled():
        print(
            f"\n[frozen, {kind}, {phase}] other keys waited at most {max(waits) * 1000:.0f} ms "
            f"(median {sorted(waits)[len(waits) // 2] * 1000:.0f} ms), {refused} of {OTHER_KEYS} told to retry; "
            f"own key {f'charged elsewhere {took:.1f} s after the freeze' if took else 'held until the thaw'}; "
            f"ledger: {len(completed)} charges, each recorded once",
            end="",
        )
