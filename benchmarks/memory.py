"""Section 3: the memory one record takes in the 1.x server's store, and whether expiry gives it back.

Everything goes through the server's real dispatch path and its public settings: the
calls through the SDK's in-memory session, the clock tests move (`clock`), the bound
--max-records sets (`max_records`). The store itself is never touched: records are
made by keyed calls and forgotten by the server's own expiry (R1), which every keyed
call runs first.
"""

import gc
import json
import tracemalloc
import uuid
from pathlib import Path

import anyio
import mcp.types as types
from harness import check, fail, print_table, progress, verdict
from mcp.shared.exceptions import McpError
from mcp.shared.memory import create_connected_server_and_client_session
from reference import load_server
from wire import REPLY_TIMEOUT

from client_demo import call_tool

RECORD_TARGET = 2048  # bytes: 10,000 records (P9's bound) then cost at most 20 MiB
# Bytes a fill and expiry may leave above the one before: interpreter caches and a
# few free-list blocks, far below one byte per record; a leak would be a record's worth each.
RESIDUE_TARGET = 4096
# Fills after the first. The dict resizes as a fill meets the slots the last expiry left,
# so the second fill may leave a table of another size than the first; from the third
# on, each fill meets the table the one before left, and only a leak can grow it.
REFILLS = 2
# First calls build validators and fill SDK caches that would pass for records: mcp
# 1.30 checks every call with jsonschema, whose reference caches keep growing for a
# few hundred calls (16 KB left "after expiry" with 100 warm-up calls, 2.5 KB with 1,000).
# Never more than the records measured, so that a smoke test stays quick.
WARMUP_CALLS = 1000


class Clock:
    """The fake clock tests give server.py (its `clock`): it moves only when told to."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def call(session, tool: str, arguments: dict, key: str | None = None) -> types.CallToolResult:
    """One tools/call through the SDK's in-memory session, checked to have succeeded."""
    try:
        result = await call_tool(session, tool, arguments, key, timeout=REPLY_TIMEOUT)
    except McpError as error:
        fail(f"{tool} answered a JSON-RPC error: {error.error}")
    check(not result.isError, f"{tool} failed: {result}")
    return result


def traced_bytes() -> int:
    """The bytes Python holds now, garbage collected first so only live objects count."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def store_memory(server, records: int) -> tuple[float, int, int]:
    """Bytes per stored record; bytes left above the baseline after the first expiry; and by the last fill and
    expiry above the one before."""
    # The real dispatch path, through the SDK's in-memory session: a session
    # drops each request's state (its response stream, its in-flight entry) when
    # the call returns, so what stays between the two totals is the store; and
    # anything a session did keep would show in the residue after expiry.
    clock = server.clock = Clock()
    server.max_records = max(server.max_records, records + 1)  # as --max-records would: room for every record

    async def charge(key: str) -> None:
        await call(session, "charge_guarded", {"amount": 1}, key)

    async def expire_all() -> int:
        """Move the clock past every window; the next keyed call forgets them all (R1) and stores itself."""
        clock.now += server.retention + 1
        await charge(str(uuid.uuid4()))
        return traced_bytes()

    async def fill() -> list[str]:
        keys = [str(uuid.uuid4()) for _ in range(records)]
        for key in keys:
            await charge(key)
        return keys

    tracemalloc.start()  # before the warm-up, so the blocks it frees are traced when reused
    try:
        async with create_connected_server_and_client_session(server.server) as session:
            for _ in range(min(WARMUP_CALLS, records)):
                await charge(str(uuid.uuid4()))
            await call(session, "get_balance", {})  # called below: its validator is built here
            await call(session, "reset_ledger", {})
            baseline = await expire_all()  # the warm-up's records gone: one record in the store
            await fill()
            stored = traced_bytes()
            charges = json.loads((await call(session, "get_balance", {})).content[0].text)["charges"]
            check(charges == 1 + records, f"expected {1 + records} charges, the ledger says {charges}")
            after = [await expire_all()]
            for _ in range(REFILLS):
                keys = await fill()
                after.append(await expire_all())
            await charge(keys[0])  # forgotten, so it executes again: a second charge under that key
            executed = 1 + (1 + REFILLS) * (records + 1) + 1
            charges = json.loads((await call(session, "get_balance", {})).content[0].text)["charges"]
            check(charges == executed, f"a key outlived its window: {charges} charges, expected {executed}")
    finally:
        tracemalloc.stop()
    return (stored - baseline) / records, after[0] - baseline, after[-1] - after[-2]


def memory(server_path: Path, records: int) -> None:
    """Section 3: what the 1.x store holds per record, and what expiry gives back."""
    progress(f"3. memory: {1 + REFILLS} times {records} keyed calls through the in-memory session, under tracemalloc")
    per_record, kept, residue = anyio.run(store_memory, load_server(server_path), records)
    print_table(
        f"3. Memory of the 1.x store (tracemalloc, in process, {records} records of the demo's real results)",
        ["measure", "bytes", "target", ""],
        [
            ["per stored record", f"{per_record:.0f}", f"<= {RECORD_TARGET}", verdict(per_record <= RECORD_TARGET)],
            ["after expiry: left above the baseline (the store's dict keeps the table it grew to)", f"{kept}", "", ""],
            [
                f"after {1 + REFILLS} fills and expiries: the last left above the one before",
                f"{residue}",
                f"<= {RESIDUE_TARGET}",
                verdict(residue <= RESIDUE_TARGET),
            ],
        ],
        "Records are made by keyed calls and forgotten by the server's own expiry, which each keyed call runs "
        "first once the fake clock has passed their window: the store is never reached into. A dict does "
        "not shrink when emptied, so the first expiry leaves the table the records grew, and the next "
        "fill may resize it; once the fills meet the table the one before left, what an expiry leaves "
        "above the one before is what the records did not give back.",
    )
