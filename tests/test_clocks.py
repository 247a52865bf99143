"""P19: leases and retention run on one clock; on PostgreSQL the database's, so instances' clocks may be wrong.

Each test starts two instances, A and B, on one store, each with a wall clock an hour
wrong in opposite directions: tests/faults/sitecustomize.py shifts `time.time` in the
server process by SEP3182_CLOCK_OFFSET seconds (and says so in its log, which each test
checks before relying on it).

PostgreSQL: the store reads only the database's clock_timestamp(), so the skew changes
nothing. A call on A killed after its charge holds its key for the lease in real time,
no less (B ahead would take over at once) and no more (B behind would wait two hours);
a key recorded on A replays on B for the retention window in real time, and runs anew
after it. Both orders of the skew are run.

SQLite: the store reads the instance's own clock. It assumes what one file implies, that
every instance runs on one machine and reads the same clock. These tests pin what a
skewed instance does there anyway: one an hour ahead takes over a call that is still
running at once, yet fencing keeps it to one charge (the original's completion is
refused and its effect rolled back); one an hour behind keeps a dead call's key in
progress long after its lease; one ahead drops a key recorded by one behind before its
window closes, and runs it again.

Those wait out real leases and windows (the slow set); the first test below is the quick
one, which waits for nothing: an instance two hours ahead of another neither takes over
its running call nor forgets its record, as it would if either were read on its own clock.
"""

import time
from pathlib import Path

import pytest
from wire import IN_PROGRESS, REPLY_TIMEOUT, error_type, start, text_of

# serial: leases and windows timed on skewed clocks, so CI runs it alone.
pytestmark = [pytest.mark.targets("2x-http"), pytest.mark.serial]

FAULTS = Path(__file__).resolve().parent / "faults"
HOUR = 3600
LEASE = 3  # seconds; longer than a retry right after a kill takes to arrive
RETENTION = 3  # seconds; longer than a retry right after the original takes to arrive
SKEWS = [pytest.param(+HOUR, -HOUR, id="A-ahead-B-behind"), pytest.param(-HOUR, +HOUR, id="A-behind-B-ahead")]


@pytest.fixture
def skewed(monkeypatch):
    """Start an instance whose wall clock is `offset` seconds wrong: skewed(offset, *server_args, **fault_variables)."""
    wires = []

    def started(offset: int, *server_args: str, **faults: str):
        monkeypatch.setenv("PYTHONPATH", str(FAULTS))
        with monkeypatch.context() as scoped:
            scoped.setenv("SEP3182_CLOCK_OFFSET", str(offset))
            for name, value in faults.items():
                scoped.setenv(name, value)
            wires.append(start("2x-http", *server_args))
        wires[-1].wait_for_log(f"faults: wall clock shifted by {offset:+g} s")
        return wires[-1]

    yield started
    for wire in wires:
        wire.close()


# ----------------------------------------------------------------------------
# PostgreSQL: the database's clock is the only clock
# ----------------------------------------------------------------------------


def test_postgres_instance_two_hours_ahead_neither_takes_over_a_running_call_nor_forgets_its_record(
    postgres_url, skewed
):
    """Read on the instances' clocks, B would find A's lease (30 s) and window (10 min) two hours gone."""
    a = skewed(-HOUR, "--store", postgres_url, "--lease", "30", "--retention", "600", "--charge-delay", "2")
    b = skewed(+HOUR, "--store", postgres_url, "--lease", "30", "--retention", "600")

    call = a.send_call("charge_guarded", {"amount": 100}, key="order-1")
    a.wait_for_log("claimed: key='order-1'")
    assert error_type(b.charge(100, key="order-1")) == IN_PROGRESS  # the lease holds, on the database's clock
    original = a.reply(call)
    assert text_of(original) == "Charged 100. New balance: 100"
    assert b.charge(100, key="order-1")["result"] == original["result"]  # and so does the window
    assert b.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.slow
@pytest.mark.parametrize(("a_offset", "b_offset"), SKEWS)
def test_postgres_lease_of_a_killed_call_lasts_its_length_in_real_time_whatever_the_instances_clocks(
    postgres_url, skewed, a_offset, b_offset
):
    a = skewed(a_offset, "--store", postgres_url, "--lease", str(LEASE), SEP3182_KILL_AT="after-charge")
    b = skewed(b_offset, "--store", postgres_url, "--lease", str(LEASE))

    sent = time.monotonic()
    a.send_call("charge_guarded", {"amount": 100}, key="order-1")
    assert a.process.wait(REPLY_TIMEOUT) == -9 and "faults: SIGKILL at after-charge" in a.log()
    died = time.monotonic()

    refused = []  # seconds after the call was sent, of each in-progress answer
    while True:
        response = b.charge(100, key="order-1")
        answered = time.monotonic() - sent
        if "result" in response:
            break
        assert error_type(response) == IN_PROGRESS, response
        refused.append(answered)
        assert time.monotonic() < died + LEASE + 20, f"B still says in progress {answered:.0f} s after the call"
        time.sleep(0.2)

    # A claimed after `sent`, so its lease ran until sent + LEASE at the earliest: B must
    # not have taken over before then, and was refused at least once meanwhile.
    assert refused and refused[0] < LEASE, f"the first retry came too late to see the lease: {refused}"
    assert answered >= LEASE - 0.05, f"B took over {answered:.2f} s after the call, within its {LEASE} s lease"
    assert text_of(response) == "Charged 100. New balance: 100"
    assert b.charge(100, key="order-1")["result"] == response["result"]
    assert b.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.slow
@pytest.mark.parametrize(("a_offset", "b_offset"), SKEWS)
def test_postgres_key_recorded_on_one_instance_replays_on_another_for_the_retention_window_in_real_time(
    postgres_url, skewed, a_offset, b_offset
):
    a = skewed(a_offset, "--store", postgres_url, "--retention", str(RETENTION))
    b = skewed(b_offset, "--store", postgres_url, "--retention", str(RETENTION))

    sent = time.monotonic()
    original = a.charge(100, key="order-2")
    recorded = time.monotonic()
    within = b.charge(100, key="order-2")
    # A recorded the key after `sent`: it is in its window until sent + RETENTION at the earliest.
    assert time.monotonic() < sent + RETENTION, "the retry came too late to land inside the window"
    assert within["result"] == original["result"]  # a replay, not a second charge

    time.sleep(max(0.0, recorded + RETENTION + 0.5 - time.monotonic()))  # the window has closed
    assert text_of(b.charge(100, key="order-2")) == "Charged 100. New balance: 200"
    assert b.ledger() == {"balance": 200, "charges": 2}


# ----------------------------------------------------------------------------
# SQLite: every instance is assumed to read the same clock (one machine)
# ----------------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path) -> str:
    return f"sqlite:{tmp_path / 'store.db'}"


@pytest.mark.slow
def test_sqlite_instance_an_hour_ahead_takes_over_a_running_call_at_once_yet_fencing_charges_once(sqlite_store, skewed):
    a = skewed(-HOUR, "--store", sqlite_store, "--charge-delay", "2")  # the default lease: 30 s
    b = skewed(+HOUR, "--store", sqlite_store)

    call = a.send_call("charge_guarded", {"amount": 100}, key="order-3")
    a.wait_for_log("claimed: key='order-3'")  # A holds the key and sleeps before its charge
    # By B's clock A's lease ended two hours ago: B takes the key over and charges, at once.
    taken = b.charge(100, key="order-3")
    assert text_of(taken) == "Charged 100. New balance: 100"

    # A charges too, but its completion is refused (its claim was taken) and rolled back.
    assert error_type(a.reply(call)) == IN_PROGRESS
    assert "lease lost: key='order-3', its effect rolled back" in a.log()
    assert a.ledger() == {"balance": 100, "charges": 1}
    assert a.charge(100, key="order-3")["result"] == taken["result"]  # A now replays B's outcome


@pytest.mark.slow
def test_sqlite_instance_an_hour_behind_keeps_a_dead_calls_key_in_progress_past_its_lease(sqlite_store, skewed):
    a = skewed(+HOUR, "--store", sqlite_store, "--lease", str(LEASE), SEP3182_KILL_AT="after-charge")
    b = skewed(-HOUR, "--store", sqlite_store, "--lease", str(LEASE))

    a.send_call("charge_guarded", {"amount": 100}, key="order-4")
    assert a.process.wait(REPLY_TIMEOUT) == -9
    time.sleep(LEASE + 1)  # the lease has passed, in real time
    # By B's clock A's lease ends in two hours: the key stays in progress until then.
    assert error_type(b.charge(100, key="order-4")) == IN_PROGRESS
    assert b.ledger() == {"balance": 0, "charges": 0}


@pytest.mark.slow
def test_sqlite_instance_an_hour_ahead_forgets_a_key_recorded_by_one_behind_inside_its_window(sqlite_store, skewed):
    a = skewed(-HOUR, "--store", sqlite_store, "--retention", str(HOUR))
    b = skewed(+HOUR, "--store", sqlite_store, "--retention", str(HOUR))

    assert text_of(a.charge(100, key="order-5")) == "Charged 100. New balance: 100"
    # A's record expires an hour after A's clock, which B's clock passed an hour ago:
    # B drops it and charges again, seconds after the first charge.
    assert text_of(b.charge(100, key="order-5")) == "Charged 100. New balance: 200"
    assert b.ledger() == {"balance": 200, "charges": 2}
