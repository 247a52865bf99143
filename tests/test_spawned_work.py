"""Work a tool spawns stays out of the call's unit of work, end to end through a server (tests/spawning_server.py).

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


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgresql"])
def test_work_a_keyed_tool_starts_in_the_background_writes_in_a_unit_of_work_of_its_own(store, tmp_path, request):
    url = {"memory": "memory", "sqlite": f"sqlite:{tmp_path / 'store.db'}"}.get(store)
    wire = start("2x-stdio", "--store", url or request.getfixturevalue("postgres_url"), server=SERVER)
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
