"""A keyed run has a life cycle and a bound (P31, P18', P32), on every store, through real server processes.

A keyed tool that hangs is stopped at its deadline, its unit of work rolled back, and that failure recorded:
its retry is told the same, and the tool never runs again under the key. The deadline is the server's, or the
tool's own, and the longest is advertised. A server whose stdin closes with a keyed tool still hung stops it
within its shutdown bound, gives its key back and exits. A tool slower than its lease is never taken over: its
own lease keeper renews the claim while it runs.
"""

import signal
import subprocess
import time
from pathlib import Path

import pytest
from wire import IN_PROGRESS, error_type, sdk2_python, start

pytestmark = pytest.mark.targets("2x-stdio")

HANGING = [str(Path(__file__).resolve().parent / "hanging_server.py")]
STORES = ["memory", "sqlite", "postgresql"]
STOPPED = "the tool did not finish in 1 s and was stopped; its effect is unknown: check, then use a new key"
FOR_EVER = "100000"  # seconds: the demo's charge delay for a charge that hangs


def store_of(kind: str, tmp_path, request) -> str:
    """A fresh store of one kind: memory, a SQLite file, or a PostgreSQL database."""
    if kind == "postgresql":
        return request.getfixturevalue("postgres_url")
    return "memory" if kind == "memory" else f"sqlite:{tmp_path / 'store.db'}"


def settings_of(wire) -> dict:
    """The idempotency settings the server advertises in server/discover."""
    capabilities = wire.request("server/discover", {})["result"]["capabilities"]
    return capabilities["tools"]["idempotency"]


@pytest.mark.parametrize("kind", STORES)
def test_a_keyed_tool_that_hangs_is_stopped_at_its_deadline_and_its_retry_gets_the_recorded_failure(
    kind, tmp_path, request
):
    wire = start("2x-stdio", "--store", store_of(kind, tmp_path, request), server=HANGING)
    try:
        first = wire.call("write_then_hang", {"text": "lost"}, key="hung-1")
        assert first["error"] == {"code": -32603, "message": STOPPED}, first
        assert "deadline passed: key='hung-1'" in wire.log()
        retry = wire.call("write_then_hang", {"text": "lost"}, key="hung-1")
        assert retry["error"] == first["error"]  # recorded: the tool never runs again under the key
        assert wire.log().count("claimed: key='hung-1'") == 1
        assert wire.call("notes", {})["result"]["structuredContent"] == {"notes": 0}  # its write rolled back
    finally:
        wire.close()


def test_the_longest_deadline_of_any_tool_is_advertised_beside_the_lease(tmp_path):
    wire = start("2x-stdio", "--store", "memory", server=HANGING)
    try:  # write_then_hang's own deadline is 1 s; every other tool has the server's 600 s
        assert settings_of(wire)["deadlineSeconds"] == 600 and settings_of(wire)["leaseSeconds"] == 1
    finally:
        wire.close()
    wire = start("2x-stdio", "--store", "memory", "--deadline", "7.5", "--lease", "2")
    try:
        assert settings_of(wire)["deadlineSeconds"] == 8 and settings_of(wire)["leaseSeconds"] == 2  # rounded up
    finally:
        wire.close()


def test_a_deadline_for_a_tool_the_server_does_not_list_is_refused_at_start_in_one_line():
    refused = subprocess.run(
        [sdk2_python(), *HANGING, "--store", "memory", "--deadline-for", "write_then_hangs"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and refused.stdout == ""
    refusal = "deadlines= names no tool of this server: write_then_hangs; name the tools as listed"
    assert [line for line in refused.stderr.splitlines() if line.startswith("ERROR")] == [
        f"ERROR:idempotency:{refusal}"
    ], refused.stderr


# (the value as Python source, as the refusal shows it)
NO_BOUND = [
    ("0", "0"),
    ("-1", "-1"),
    ("float('nan')", "nan"),
    ("float('inf')", "inf"),
    ("'60'", "'60'"),
    ("True", "True"),
]


@pytest.mark.parametrize(("seconds", "shown"), NO_BOUND)
def test_a_tools_deadline_that_is_no_bound_is_refused_at_construction_in_one_line(seconds, shown):
    build = f"from mcp_idempotency.layer import Idempotency; Idempotency('memory', deadlines={{'export': {seconds}}})"
    refused = subprocess.run([sdk2_python(), "-c", build], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "mcp_idempotency.errors.InvalidSetting: "
        f"deadlines['export']={shown}: a deadline must be a finite number above zero"
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_server_whose_stdin_closes_with_a_keyed_tool_hung_stops_it_gives_its_key_back_and_exits(kind, tmp_path):
    url = "memory" if kind == "memory" else f"sqlite:{tmp_path / 'store.db'}"
    wire = start("2x-stdio", "--store", url, "--charge-delay", FOR_EVER)
    wire.send_call("charge_guarded", {"amount": 100}, key="shut-1")
    wire.wait_for_log("claimed: key='shut-1'")
    assert wire.close() == 0  # exited by itself within the shutdown bound (wire.close kills it after 15 s)
    assert "released: key='shut-1', its run was stopped as the server shut down" in wire.log()
    if kind == "sqlite":  # the key was given back: the next server runs the retry at once
        again = start("2x-stdio", "--store", url)
        try:
            assert again.charge(100, key="shut-1", tool="charge_guarded")["result"]["content"][0]["text"].startswith(
                "Charged 100."
            )
        finally:
            again.close()


@pytest.mark.targets("2x-http")
def test_an_http_server_sent_sigterm_with_a_keyed_tool_hung_stops_it_and_exits():
    wire = start("2x-http", "--store", "memory", "--charge-delay", FOR_EVER)
    try:
        wire.send_call("charge_guarded", {"amount": 100}, key="term-1")
        wire.wait_for_log("claimed: key='term-1'")
        wire.process.send_signal(signal.SIGTERM)
        # uvicorn's grace for the request in flight, then the layer's for the run: 10 s, well inside 60
        assert wire.process.wait(timeout=60) in (0, -signal.SIGTERM)
        assert "released: key='term-1', its run was stopped as the server shut down" in wire.log()
    finally:
        wire.close()


@pytest.mark.parametrize("kind", STORES)
def test_a_tool_working_three_seconds_under_a_one_second_lease_is_never_taken_over(kind, tmp_path, request):
    wire = start("2x-stdio", "--store", store_of(kind, tmp_path, request), "--lease", "1", "--charge-delay", "3")
    try:
        before = wire.ledger()
        original = wire.send_call("charge_guarded", {"amount": 100}, key="slow-1")
        wire.wait_for_log("claimed: key='slow-1'")
        refused = []
        while not wire.answered(original):
            time.sleep(0.5)
            refused.append(error_type(retry := wire.charge(100, key="slow-1")) or retry)
        outcome = wire.reply(original)
        assert "result" in outcome, outcome
        assert set(refused[:-1]) == {IN_PROGRESS} and len(refused) >= 5  # in progress past two leases
        assert refused[-1] == IN_PROGRESS or refused[-1]["result"] == outcome["result"]
        assert wire.ledger()["balance"] == before["balance"] + 100  # charged once
    finally:
        wire.close()


def test_the_acknowledgement_is_on_the_first_answer_and_every_replay_and_never_on_an_unkeyed_call(tmp_path):
    wire = start("2x-stdio", "--store", "memory")
    try:
        first = wire.charge(100, key="ack-1")["result"]
        replay = wire.charge(100, key="ack-1")["result"]
        unkeyed = wire.charge(100)["result"]
        acknowledgement = {"com.example.sep3182/idempotency": {"idempotencyKey": "ack-1"}}
        assert first["_meta"].items() >= acknowledgement.items() and replay == first
        assert "com.example.sep3182/idempotency" not in unkeyed.get("_meta", {})
    finally:
        wire.close()
