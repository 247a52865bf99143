"""A server on the library whose keyed tools hang, one with a deadline of its own, over stdio.

    python hanging_server.py --store URL [--deadline-for TOOL] [--verbose]

`write_then_hang(text)` writes a note in the call's unit of work, then never returns; its deadline is
one second (`deadlines=`), the server's is ten minutes. `notes()` counts the notes kept.
`--deadline-for TOOL` gives TOOL a deadline too, to show how a name the server lists no tool of is refused.
"""

import argparse
import logging
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from notes_tools import NOTES, counted

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.rules import Placement
from mcp_idempotency.stores import Limits

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--store", required=True, metavar="URL")
parser.add_argument("--verbose", action="store_true", help="log every idempotency decision on stderr")
parser.add_argument("--placement", type=Placement, default=Placement.PARAMS, help="where keys are read (tests/wire.py)")
parser.add_argument("--deadline-for", default="write_then_hang", metavar="TOOL", help="the tool given a deadline")
options = parser.parse_args()
logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if options.verbose else logging.INFO)

keys = Idempotency(
    options.store,
    limits=Limits(lease=1),
    tables=[NOTES],
    placement=options.placement,
    deadlines={options.deadline_for: 1},
)
mcp = MCPServer("hanging", version="1.0", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)


@mcp.tool()
async def write_then_hang(text: str) -> str:
    """Write `text` down in the call's unit of work, then hang."""
    async with keys.transaction() as tx:
        await tx.execute("INSERT INTO notes VALUES ($1)", text)
        await anyio.sleep_forever()
    return "never"


counted(mcp, keys)
mcp.run()
