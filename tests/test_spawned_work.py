"""Work a tool spawns stays out of the call's unit of work, end to end through a server (tests/spawning_server.py).

P28': a unit of work belongs to the task that opened it, so the spawned work, whenever it enters
`keys.transaction()`, during the call or after it, gets one of its own.

The tool starts a task that copies the keyed call's context, the layer's unit of work in it, and answers
before the task runs. Once the call's unit of work has ended, the task's `keys.transaction()` begins one of
its own: its write lands (not lost with a finished transaction, on memory), and the store's writer is free
(no unit of work waits for ever behind it, on SQLite). On every store; the key replays and spawns nothing.
"""

import time
from pathlib import Path

import pytest
from wire import start

pytestmark = pytest.mark.targets("2x-stdio")

SERVER = [str(Path(__file__).resolve().parent / "spawning_server.py")]
SETTLE = 10  # seconds the background work may take on a slow machine


def notes_after(wire, count: int) -> int:
    """The notes written, once there are `count` (or after SETTLE seconds, however many there are)."""
    deadline = time.monotonic() + SETTLE
    while (written := wire.call("notes", {})["result"]["structuredContent"]["notes"]) < count:
        if time.monotonic() > deadline:
            return written
        time.sleep(0.05)
    return written


def store_url(store: str, tmp_path, request) -> str:
    """The URL of a new store of kind `store`."""
    url = {"memory": "memory", "sqlite": f"sqlite:{tmp_path / 'store.db'}"}.get(store)
    return url or request.getfixturevalue("postgres_url")


# (arguments, notes it writes, whether it fails): spawned work that writes during the call and after it,
# the tool writing nothing itself, writing first, or failing once the work is started.
STRADDLING = {
    "spawned work writes first": ({"text": "a"}, 2, False),
    "the tool writes first": ({"text": "b", "first": True}, 3, False),
    "the tool fails": ({"text": "c", "fail": True}, 2, True),
}


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgresql"])
def test_work_spawned_during_a_keyed_call_and_writing_after_it_leaves_one_answer_and_the_store_usable(
    store, tmp_path, request
):
    """Probe B's cases 2 to 4: the call answers once (its result, or its tool's error), the retry replays that,
    the spawned work's writes land in its own unit of work, and the store serves reads and new keys after."""
    wire = start("2x-stdio", "--store", store_url(store, tmp_path, request), server=SERVER)
    try:
        written = 0
        for case, (arguments, notes, fails) in STRADDLING.items():
            first = wire.call("note_straddling", arguments, key=case)
            assert "result" in first, (case, first)
            assert first["result"].get("isError", False) is fails, (case, first)
            written += notes
            assert notes_after(wire, written) == written, case  # each unit of work committed its own notes
            again = wire.call("note_straddling", arguments, key=case)
            assert again["result"] == first["result"], case  # replayed
        assert "result" in wire.call("note_later", {"text": "after"}, key="after"), "the store's writer is free"
        assert notes_after(wire, written + 1) == written + 1
    finally:
        wire.close()


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgresql"])
def test_work_a_keyed_tool_starts_in_the_background_writes_in_a_unit_of_work_of_its_own(store, tmp_path, request):
    wire = start("2x-stdio", "--store", store_url(store, tmp_path, request), server=SERVER)
    try:
        first = wire.call("note_later", {"text": "first"}, key="note-1")
        assert notes_after(wire, 1) == 1  # the background write landed after the call ended
        second = wire.call("note_later", {"text": "second"}, key="note-2")  # the writer is free
        assert "result" in second, second
        assert notes_after(wire, 2) == 2
        assert wire.call("note_later", {"text": "first"}, key="note-1")["result"] == first["result"]  # replayed
        time.sleep(0.5)  # long enough for a spawned write to land, were the replay to spawn one
        assert wire.call("notes", {})["result"]["structuredContent"]["notes"] == 2
    finally:
        wire.close()
