"""A server whose tools work inside their unit of work the way a tool author may write them.

    python unit_of_work_server.py --store URL [--lease SECONDS] [--placement params|meta|argument] [--verbose]

`typo()` sends SQL with a syntax error in its unit of work: the tool's own bug. `note_slowly(text, seconds)`
writes a note, then works `seconds` inside its unit of work before it answers. `notes()` counts the notes.
Over stdio.
"""

import argparse
import asyncio
import logging
import sys

from mcp.server.mcpserver import MCPServer
from notes_tools import NOTES, counted

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import Placement
from mcp_idempotency.stores import Limits

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--store", required=True, metavar="URL")
parser.add_argument("--lease", type=float, default=30.0, help="seconds a holder that stopped renewing keeps its key")
parser.add_argument("--verbose", action="store_true", help="log every idempotency decision on stderr")
parser.add_argument("--placement", type=Placement, default=Placement.PARAMS, help="where keys are read (tests/wire.py)")
options = parser.parse_args()
logging.basicConfig(
    stream=sys.stderr, level=logging.DEBUG if options.verbose else logging.INFO, format="%(name)s: %(message)s"
)

keys = Idempotency(options.store, limits=Limits(lease=options.lease), tables=[NOTES], placement=options.placement)
mcp = MCPServer("notes", version="1.0", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)


@mcp.tool()
async def typo() -> str:
    """Count the notes, with a typo in the SQL."""
    async with keys.transaction() as tx:
        await tx.fetchone("SELEC count(*) FROM notes")
    return "counted"


@mcp.tool()
async def note_slowly(text: str, seconds: float) -> str:
    """Write `text` down, then work `seconds` inside the unit of work (a slow payment processor) before answering."""
    async with keys.transaction() as tx:
        await tx.execute("INSERT INTO notes VALUES ($1)", text)
        await asyncio.sleep(seconds)
    return f"noted {text!r}"


counted(mcp, keys)
mcp.run()
