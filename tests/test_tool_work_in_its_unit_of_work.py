"""A tool's own errors, and its slow work inside its unit of work, end to end through servers
(tests/unit_of_work_server.py) on every store.

P23': an error of the tool's own SQL is the tool's outcome, recorded and replayed; only the store's own
failures are idempotency_store_unavailable. P32: keeping a live claim alive never waits on what the tool's
unit of work holds, so a tool working inside it for three leases is never taken over by a retry on another
instance; and on SQLite, where that unit of work holds the file's one writer, a claim for another key is
answered within the store's wait, not held for the unit of work's whole length.
"""

import time
from pathlib import Path

import pytest
from conftest import fresh_store
from stores import decisions
from wire import error_type, start, text_of

pytestmark = pytest.mark.targets("2x-stdio")

SERVER = [str(Path(__file__).resolve().parent / "unit_of_work_server.py")]
LEASE = 1.0  # seconds; renewed every quarter of it
WORK = 3.0  # seconds the slow tool works inside its unit of work: three leases


def served(url: str, *options: str):
    """A unit-of-work server on the store at `url`."""
    return start("2x-stdio", "--store", url, *options, server=SERVER)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_typo_in_a_tools_sql_reaches_the_client_as_the_tools_error_on_its_first_call_and_on_its_retry(kind, tmp_path):
    with fresh_store(kind, tmp_path, "store") as url:
        wire = served(url)
        try:
            first = wire.call("typo", {}, key="typo")
            assert first["result"]["isError"] is True, first  # the tool's own outcome, not a store outage
            assert text_of(first) == "Error executing tool typo", first  # as the SDK tells any tool's exception
            again = wire.call("typo", {}, key="typo")
            assert again["result"] == first["result"]  # recorded, so replayed: the tool did not run again
            assert decisions(wire)[("replayed", "typo")] == 1
            assert "store unavailable" not in wire.log()
        finally:
            wire.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_tool_working_three_leases_inside_its_unit_of_work_is_never_taken_over_by_a_retry_on_another_instance(
    kind, tmp_path
):
    with fresh_store(kind, tmp_path, "store") as url:
        first, other = served(url, "--lease", str(LEASE)), served(url, "--lease", str(LEASE))
        try:
            call = first.send_call("note_slowly", {"text": "slow", "seconds": WORK}, key="slow")
            first.wait_for_log("claimed: key='slow'")
            retries = []
            while not first.answered(call):
                retries.append(other.call("note_slowly", {"text": "slow", "seconds": WORK}, key="slow"))
                time.sleep(LEASE / 4)
            answer = first.reply(call)
            assert text_of(answer) == "noted 'slow'", answer
            in_progress = [error_type(retry) for retry in retries[:-1]]  # the last may have come after the commit
            assert len(in_progress) >= 3 and set(in_progress) == {"idempotency_key_in_progress"}, retries
            assert "result" in retries[-1] or error_type(retries[-1]) == "idempotency_key_in_progress", retries[-1]
            assert decisions(first)[("claimed", "slow")] == 1
            assert decisions(other)[("claimed", "slow")] == 0, "a retry took the live run over"
            assert (
                other.call("note_slowly", {"text": "slow", "seconds": WORK}, key="slow")["result"] == answer["result"]
            )
            assert other.call("notes", {})["result"]["structuredContent"]["notes"] == 1
        finally:
            first.close()
            other.close()


def test_an_unrelated_keys_claim_is_answered_within_the_wait_while_another_tool_holds_sqlites_writer(tmp_path):
    """Lease 1 s, so the store's wait is a third of it: each claim of another key, on this instance or another,
    is answered (told to retry) while the slow unit of work still holds the file, not once it lets go."""
    url = f"sqlite:{tmp_path / 'store.db'}"
    first, other = served(url, "--lease", str(LEASE)), served(url, "--lease", str(LEASE))
    try:
        call = first.send_call("note_slowly", {"text": "slow", "seconds": WORK}, key="slow")
        first.wait_for_log("claimed: key='slow'")
        time.sleep(0.2)  # its first statement has taken the writer
        answers = [
            wire.call("note_slowly", {"text": f"other {n}", "seconds": 0}, key=f"other {n}")
            for n, wire in enumerate([first, other, first, other])
        ]
        assert not first.answered(call), "the slow unit of work ended before the claims were answered"
        assert [error_type(answer) for answer in answers] == ["idempotency_store_unavailable"] * 4, answers
        assert text_of(first.reply(call)) == "noted 'slow'"
        retried = [
            wire.call("note_slowly", {"text": f"other {n}", "seconds": 0}, key=f"other {n}")
            for n, wire in enumerate([first, other, first, other])
        ]
        assert all("result" in answer for answer in retried), retried  # nothing of them was kept: each runs now
        assert other.call("notes", {})["result"]["structuredContent"]["notes"] == 5
    finally:
        first.close()
        other.close()
