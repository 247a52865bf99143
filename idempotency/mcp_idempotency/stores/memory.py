"""memory: one process's dicts, which no other instance shares, so no guarantee across them (offered to show why).

A tool's own data lives in a private in-memory SQLite database, so a tool's statements
run unchanged here, on SQLite and on PostgreSQL; the records stay in dicts.
"""

import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from . import Full, Held, Limits, Store, Transaction, Won, may_take, new_owner
from .sql import SQLiteStatements, create_tables
from .unit_of_work import Completion, take

__all__ = []


# Said when a unit of work waits past the store's wait for another to let go of the tools' tables.
WRITER_TAKEN = "memory: another unit of work holds the tools' tables; do slow work before the first statement"


@dataclass
class Record:
    principal: str  # whose share it counts against
    fingerprint: bytes
    status: str  # "running" or "completed"
    deadline: float  # running: the lease's end; completed: the retention window's end
    owner: str | None = None  # running: the claim's token, so only it gives the key back
    outcome: str | None = None  # completed: what is replayed


class MemoryStore(Store):
    """Records, and the tools' own tables (MemoryTransaction), in this process only."""

    url = "memory"

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic, tables: Sequence[str] = ()):
        super().__init__(limits)
        self.clock = clock
        self.records: dict[str, Record] = {}
        # Each completion, (key, deadline), in the order they happened, which is the order
        # they expire in: a purge only ever looks at the front. A key completed again
        # after it expired is in it twice; only the entry with its record's deadline is current.
        self.expiry_order: deque[tuple[str, float]] = deque()
        self.keys_of: dict[str, set[str]] = {}  # principal -> its keys, as the SQL stores' index on principal
        # The tools' tables: statements run on the event loop (no disk to wait for), one
        # unit of work at a time, from its first statement to its end, as on SQLite.
        self.data = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.turn = anyio.Lock()
        create_tables(self.data, tables)

    async def close(self) -> None:
        self.data.close()

    def purge(self) -> None:
        """Drop the completed records whose window has passed; called only when the store is full."""
        now = self.clock()
        while self.expiry_order:
            key, deadline = self.expiry_order[0]
            record = self.records.get(key)
            # Stale, if the record has gone, or runs again, or completed again since: then
            # it has a later entry, and this one must neither drop it nor hold up the purge.
            current = record is not None and record.status == "completed" and record.deadline == deadline
            if current and deadline > now:
                return
            self.expiry_order.popleft()
            if current:
                self.drop(key)

    def drop(self, key: str) -> None:
        """Delete one record, and its place in its principal's keys."""
        record = self.records.pop(key)
        self.keys_of[record.principal].discard(key)

    def share_taken(self, principal: str, key: str, now: float) -> bool:
        """Does `principal` hold its share of records whose deadline is ahead, `key`'s own aside?"""
        keys, share = self.keys_of.get(principal, set()), self.limits.max_records_per_principal
        if len(keys) < share:  # fewer records than the share, live or not: no walk
            return False
        live = (k for k in keys if k != key and self.records[k].deadline > now)
        return sum(1 for _ in live) >= share

    async def claim(self, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        # No `await` in here: on one event loop the look-up and the write are one step.
        now = self.clock()
        record = self.records.get(key)
        if record is not None and not may_take(record.status, record.fingerprint, record.deadline <= now, fingerprint):
            return Held(record.fingerprint, record.outcome)  # replay, conflict or in progress
        if self.share_taken(principal, key, now):
            return Full()
        if record is None and len(self.records) >= self.limits.max_records:
            self.purge()
            if len(self.records) >= self.limits.max_records:
                return Full()
        owner = new_owner()
        self.records[key] = Record(principal, fingerprint, "running", now + self.limits.lease, owner)
        self.keys_of.setdefault(principal, set()).add(key)
        return Won(owner)

    async def release(self, key: str, owner: str) -> None:
        record = self.records.get(key)
        if record is not None and record.status == "running" and record.owner == owner:
            self.drop(key)

    async def renew(self, key: str, owner: str) -> bool:
        record = self.records.get(key)
        if record is None or record.status != "running" or record.owner != owner:
            return False
        record.deadline = self.clock() + self.limits.lease
        return True

    async def forget(self, principal: str) -> int:
        keys = self.keys_of.pop(principal, set())
        for key in keys:
            del self.records[key]
        return len(keys)

    def begin(self) -> Transaction:
        return MemoryTransaction(self)


class MemoryTransaction(SQLiteStatements):
    """A tool's statements, in a transaction of the private database begun at the first of them;
    the record's completion is checked as it commits, so a fenced one drops them."""

    def __init__(self, store: MemoryStore):
        super().__init__()
        self.store = store

    async def send(self, begin: bool, savepoints: list[str], statement: Callable[[Any], Any]) -> Any:
        db = self.store.data
        if begin:
            await take(self.store.turn, self.store.limits.wait, WRITER_TAKEN)
            try:
                db.execute("BEGIN")
            except BaseException:
                self.store.turn.release()
                raise
            self.begun = True
        for name in savepoints:
            db.execute(f"SAVEPOINT {name}")
        return statement(db)

    async def finish(self, completion: Completion | None) -> bool:
        # No `await` from the check to COMMIT: on one event loop, nothing completes the key meanwhile.
        if completion is not None:
            record = self.store.records.get(completion.key)
            if record is None or record.status != "running" or record.fingerprint != completion.fingerprint:
                self.let_go("ROLLBACK")  # fenced off, and with it every statement of this unit of work
                return False
            record.status, record.owner, record.outcome = "completed", None, completion.outcome
            record.deadline = self.store.clock() + self.store.limits.retention  # the window opens at completion
            self.store.expiry_order.append((completion.key, record.deadline))  # completion order is expiry order
        self.let_go("COMMIT")
        return completion is not None

    async def abandon(self) -> None:
        self.let_go("ROLLBACK")

    def let_go(self, statement: str) -> None:
        """COMMIT or ROLLBACK, if this unit of work began; then let the next one in."""
        if not self.begun:
            return
        try:
            self.store.data.execute(statement)
        finally:
            self.begun = False
            self.store.turn.release()
