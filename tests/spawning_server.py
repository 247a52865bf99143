"""A server whose tool starts work in the background and returns at once, the way a tool author writes it.

    python spawning_server.py --store URL [--placement params|meta|argument] [--verbose]

`note_later(text)` starts a task with asyncio, which copies the call's context, the layer's open unit of
work included, and answers before the task runs; the task then writes the note in a unit of work of its
own, after the call's has ended. `note_straddling(text, first, fail)` starts one that writes at once,
while the call still runs, and again after it has answered; the tool writes first if `first`, and
raises once the work is started if `fail`. `notes()` counts what was written. Over stdio.
"""

import argparse
import asyncio
import logging
import sys
from collections.abc import Coroutine
from typing import Any

from mcp.server.mcpserver import MCPServer
from notes_tools import NOTES, counted

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import Placement

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--store", required=True, metavar="URL")
parser.add_argument("--verbose", action="store_true", help="log every idempotency decision on stderr")
parser.add_argument("--placement", type=Placement, default=Placement.PARAMS, help="where keys are read (tests/wire.py)")
options = parser.parse_args()
logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if options.verbose else logging.INFO)

keys = Idempotency(options.store, tables=[NOTES], placement=options.placement)
mcp = MCPServer("notes", version="1.0", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)
started: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references to its tasks


async def write_note(text: str) -> None:
    """The background work: a moment later, the note, in the store."""
    await asyncio.sleep(0.2)
    async with keys.transaction() as tx:
        await tx.execute("INSERT INTO notes VALUES ($1)", text)


async def write_twice(text: str) -> None:
    """The background work that straddles the call: a note at once, another half a second later."""
    async with keys.transaction() as tx:
        await tx.execute("INSERT INTO notes VALUES ($1)", f"{text}, at once")
        await asyncio.sleep(0.5)
        await tx.execute("INSERT INTO notes VALUES ($1)", f"{text}, later")


def start(work: Coroutine[Any, Any, None]) -> None:
    """Start `work` in the background, as a tool author does with asyncio."""
    task = asyncio.get_running_loop().create_task(work)
    started.add(task)
    task.add_done_callback(started.discard)


@mcp.tool()
async def note_later(text: str) -> str:
    """Write `text` down in the background; answer at once."""
    start(write_note(text))
    return f"noting {text!r}"


@mcp.tool()
async def note_straddling(text: str, first: bool = False, fail: bool = False) -> str:
    """Write `text` twice in the background, during the call and after it; first here too, if `first`."""
    if first:
        async with keys.transaction() as tx:
            await tx.execute("INSERT INTO notes VALUES ($1)", text)
    start(write_twice(text))
    await asyncio.sleep(0.2)  # the background work has begun its unit of work, and written once
    if fail:
        raise ValueError(f"{text!r} failed once its notes were started")
    return f"noting {text!r}"


counted(mcp, keys)
mcp.run()
