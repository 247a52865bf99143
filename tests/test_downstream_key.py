"""P27: the key end to end. An e-mail tool forwards the layer's downstream key to the mail API it sends
through, which deduplicates on its Idempotency-Key header; the two ways a keyed call can run twice
then send one e-mail, where without the key they send two.

Real processes: the mail API (retry/mail_provider.py, an HTTP server on loopback), and two
instances of the outbox server (retry/mail_server.py, over stdio) on one store, a SQLite file
or a PostgreSQL database, with a one-second lease. One instance has a fault (tests/faults):

- it dies between the send and the record (SIGKILL once the tool returned, before the unit of
  work commits); a retry on the other instance, once the lease has passed, takes the key over
  and sends again;
- it freezes between the claim and the send (SIGSTOP, as a paused VM); the other instance takes
  the key over once the lease has passed without a renewal, and sends; then it wakes and sends
  too, and its completion is fenced off.

What is sent is read from the mail API, not from the servers. And first, with no fault: a send three
times slower than its lease, retried every half second on the other instance, is sent once even with no
key forwarded, because its server renews its lease (P18').
"""

import json
import signal
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from wire import IN_PROGRESS, error_type, sdk2_python, start

ROOT = Path(__file__).resolve().parent.parent
FAULTS = Path(__file__).resolve().parent / "faults"
MAIL_SERVER = [str(ROOT / "retry" / "mail_server.py")]
PROVIDER = ROOT / "retry" / "mail_provider.py"

pytestmark = [pytest.mark.targets("2x-stdio"), pytest.mark.timeout(120)]

LEASE = 1.0  # seconds
EMAIL = {"to": "ada@example.com", "subject": "Your receipt", "body": "Paid 100."}
STORE_UNAVAILABLE = "idempotency_store_unavailable"  # as the wire carries it (P5)
FORWARDING = [pytest.param(True, id="key-forwarded"), pytest.param(False, id="no-key-forwarded")]


@contextmanager
def mail_provider():
    """The mail API, on a free loopback port; its URL. Stopped at the end."""
    process = subprocess.Popen([sdk2_python(), str(PROVIDER)], stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait()


def sent(provider: str) -> int:
    """How many e-mails the mail API sent: the ground truth."""
    with urllib.request.urlopen(provider, timeout=10) as answer:
        return int(json.load(answer)["sent"])


def outbox(store_url: str, provider: str, forwarding: bool, monkeypatch, fault: tuple[str, str] | None, *more: str):
    """One outbox server on the shared store, sending through `provider`, with a fault if one is given."""
    with monkeypatch.context() as faulty:
        if fault is not None:
            faulty.setenv("PYTHONPATH", str(FAULTS))
            faulty.setenv(*fault)
        return start(
            "2x-stdio",
            *("--store", store_url, "--lease", str(LEASE), "--provider", provider),
            *(() if forwarding else ("--no-forwarding",)),
            *more,
            server=MAIL_SERVER,
        )


@contextmanager
def two_outboxes(store_url: str, forwarding: bool, monkeypatch, fault: tuple[str, str] | None, *more: str):
    """The mail API, a healthy outbox server, and a second one with `fault` (or `more` options): (the API's URL,
    the healthy one, the other). All stopped at the end, the other woken first if it was frozen."""
    with mail_provider() as provider:
        healthy = outbox(store_url, provider, forwarding, monkeypatch, None)
        other = outbox(store_url, provider, forwarding, monkeypatch, fault, *more)
        try:
            yield provider, healthy, other
        finally:
            other.process.send_signal(signal.SIGCONT)
            other.close()
            healthy.close()


def sent_through(wire, key: str) -> dict:
    """Send the e-mail under `key`, again while the key is in progress or the store busy; the answer."""
    deadline = time.monotonic() + 10 * LEASE
    while True:
        answer = wire.call("send_email", EMAIL, key=key)
        if error_type(answer) not in (IN_PROGRESS, STORE_UNAVAILABLE) or time.monotonic() > deadline:
            return answer
        time.sleep(LEASE / 4)


SLOW_SEND, RETRY_EVERY = 3 * LEASE, 0.5  # seconds


@pytest.mark.slow  # three leases of a send, in real time, on each store (14 s): a timing run
def test_a_send_three_times_slower_than_its_lease_retried_on_another_instance_is_sent_once(store_url, monkeypatch):
    """P18': no key forwarded, so only the lease keeps the retries from sending: its server renews it, and
    every retry, on the other instance, every half second past the lease, is in progress at once."""
    slow = ("--charge-delay", str(SLOW_SEND))
    with two_outboxes(store_url, False, monkeypatch, None, *slow) as (provider, other, running):
        original = running.send_call("send_email", EMAIL, key="receipt")
        running.wait_for_log("claimed: key='receipt'")
        began, retries = time.monotonic(), []
        while not running.answered(original):
            time.sleep(RETRY_EVERY)
            sent_at = time.monotonic()
            answer = other.call("send_email", EMAIL, key="receipt")
            if "result" in answer:  # sent as the original completed: its replay
                break
            assert error_type(answer) == IN_PROGRESS and time.monotonic() - sent_at < RETRY_EVERY, answer
            retries.append(sent_at - began)
        outcome = running.reply(original)
        assert sent(provider) == 1, "a retry took the live run over and sent again"
        assert max(retries) > 2 * LEASE, retries  # retried well past the lease
        assert other.call("send_email", EMAIL, key="receipt")["result"] == outcome["result"]


@pytest.mark.parametrize("forwarding", FORWARDING)
@pytest.mark.slow
@pytest.mark.serial  # waits out a lease against the clock, so CI runs it alone
def test_a_send_whose_server_died_before_recording_it_is_sent_once_when_the_key_is_forwarded(
    store_url, forwarding, monkeypatch
):
    """S4's caveat: the e-mail went, the record did not. The retry runs the tool again on another
    instance; the mail API drops the second send when it carries the same key."""
    killed = ("SEP3182_KILL_AT", "after-tool")
    with two_outboxes(store_url, forwarding, monkeypatch, killed) as (provider, survivor, victim):
        victim.send_call("send_email", EMAIL, key="receipt")
        victim.wait_for_log("faults: SIGKILL at after-tool")
        assert sent(provider) == 1  # sent, and never recorded
        answer = sent_through(survivor, "receipt")  # in progress until the dead claim's lease passes
        assert "result" in answer, answer
        assert sent(provider) == (1 if forwarding else 2)
        assert survivor.call("send_email", EMAIL, key="receipt")["result"] == answer["result"]  # the replay


@pytest.mark.parametrize("forwarding", FORWARDING)
@pytest.mark.slow
@pytest.mark.serial  # waits out a lease against the clock, so CI runs it alone
def test_a_frozen_server_taken_over_that_wakes_and_sends_sends_once_when_the_key_is_forwarded(
    store_url, forwarding, monkeypatch
):
    """P18': a holder that stops renewing (frozen) is taken over once its lease has passed; when it
    wakes, it sends as well. The mail API drops that send when it carries the same key."""
    stopped = ("SEP3182_STOP_AT", "after-claim")
    with two_outboxes(store_url, forwarding, monkeypatch, stopped) as (provider, healthy, frozen):
        call = frozen.send_call("send_email", EMAIL, key="receipt")
        frozen.wait_for_log("faults: SIGSTOP at after-claim")
        answer = sent_through(healthy, "receipt")  # in progress until the frozen claim's lease passes
        assert "result" in answer, answer
        assert sent(provider) == 1
        frozen.process.send_signal(signal.SIGCONT)
        late = frozen.reply(call)  # it ran the tool; its completion is fenced off, its caller told to retry
        assert error_type(late) == IN_PROGRESS, late
        assert sent(provider) == (1 if forwarding else 2)
        assert frozen.call("send_email", EMAIL, key="receipt")["result"] == answer["result"]  # the replay
