"""A third server, written from mcp_idempotency's public API alone: seats booked once per key.

    python booking.py [--store URL] [--delay SECONDS] [--retention SECONDS] [--lease SECONDS]
                      [--max-records N] [--transport stdio|http] [--port PORT]

It knows nothing of the demo's ledger. Its side effect lives in this process, not in
the store, so a crash between the booking and the record lets a retry book again
(S4's caveat); a tool whose effect lives in the store joins the layer's unit of work
with `async with keys.transaction() as tx:` instead (P17).
"""

import argparse

import anyio
from mcp.server.mcpserver import MCPServer

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Limits

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--store", default="sqlite:booking.db")
parser.add_argument("--delay", type=float, default=0.0, help="seconds each booking takes")
parser.add_argument("--retention", type=float, default=Limits.retention)
parser.add_argument("--lease", type=float, default=Limits.lease)
parser.add_argument("--deadline", type=float, default=Limits.deadline, help="seconds a keyed call may run")
parser.add_argument("--max-records", type=int, default=Limits.max_records)
parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
parser.add_argument("--port", type=int, default=8000, help="HTTP: on 127.0.0.1, at /mcp")
options = parser.parse_args()

limits = Limits(
    retention=options.retention, lease=options.lease, max_records=options.max_records, deadline=options.deadline
)
keys = Idempotency(options.store, limits=limits)
mcp = MCPServer(  # the one line: the layer, its capability, its store's lifetime
    "booking", version="1.0", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan
)
booked = {"bookings": 0, "seats": 0}
waiting: list[int] = []


@mcp.tool()
async def book_seats(seats: int) -> str:
    """Book `seats` seats: the side effect a retry must not repeat."""
    if seats <= 0:
        raise ValueError("seats must be a positive number")
    await anyio.sleep(options.delay)
    booked["bookings"] += 1
    booked["seats"] += seats
    return f"Booking {booked['bookings']}: {seats} seats"


@mcp.tool()
def join_waiting_list(seats: int) -> str:
    """Wait for `seats` seats: the same arguments as a booking, yet another request under any key (E1)."""
    waiting.append(seats)
    return f"Waiting list: {len(waiting)} requests"


@mcp.tool()
def bookings() -> dict[str, int]:
    """How many bookings were made, and how many seats."""
    return booked


if options.transport == "http":
    mcp.run("streamable-http", port=options.port, stateless_http=True)
else:
    mcp.run()
