"""memory: one process's dicts, what rule L2 says does not satisfy the guarantee (offered to show why)."""

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from . import Full, Held, Limits, Store, Transaction, Won, may_take, new_owner


@dataclass
class Record:
    principal: str  # whose share it counts against (P9')
    fingerprint: bytes
    status: str  # "running" or "completed"
    deadline: float  # running: the lease's end (P18); completed: the retention window's end (P8)
    owner: str | None = None  # running: the claim's token, so only it gives the key back (P6')
    outcome: str | None = None  # completed: what is replayed


class MemoryStore(Store):
    """Records, and the numbers tools keep by name (MemoryTransaction), in this process only."""

    url = "memory"

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        super().__init__(limits)
        self.clock = clock
        self.records: dict[str, Record] = {}
        # Completed keys in the order they completed, which is the order they expire
        # in: a purge only ever looks at the front (P8).
        self.expiry_order: deque[str] = deque()
        self.keys_of: dict[str, set[str]] = {}  # P9': principal -> its keys, as the SQL stores' index on principal
        self.values: dict[str, int] = {}  # what tools keep here, by name, as committed

    def purge(self) -> None:
        """P8, P9: drop the completed records whose window has passed; called only when the store is full."""
        now = self.clock()
        while self.expiry_order:
            record = self.records.get(self.expiry_order[0])
            if record is not None and record.status == "completed" and record.deadline > now:
                return
            key = self.expiry_order.popleft()
            if record is not None and record.status == "completed":
                self.drop(key)

    def drop(self, key: str) -> None:
        """Delete one record, and its place in its principal's keys."""
        record = self.records.pop(key)
        self.keys_of[record.principal].discard(key)

    def share_taken(self, principal: str, key: str, now: float) -> bool:
        """P9': does `principal` hold its share of records whose deadline is ahead, `key`'s own aside?"""
        keys, share = self.keys_of.get(principal, set()), self.limits.max_records_per_principal
        if len(keys) < share:  # fewer records than the share, live or not: no walk
            return False
        live = (k for k in keys if k != key and self.records[k].deadline > now)
        return sum(1 for _ in live) >= share

    async def claim(self, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        # No `await` in here: on one event loop the look-up and the write are one step (P16).
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

    async def forget(self, principal: str) -> int:
        keys = self.keys_of.pop(principal, set())
        for key in keys:
            del self.records[key]
        return len(keys)

    def begin(self) -> Transaction:
        return MemoryTransaction(self)


class MemoryTransaction(Transaction):
    """A tool's changes wait here until commit, so a fenced completion can drop them (P17, P18).

    No SQL: a tool keeps whole numbers by name, read with `value` and changed with
    `add`. A change is staged as a delta, which commutes with every other unit of
    work's: two that overlap on the one event loop both count when they commit. A
    savepoint is a copy of what was staged when it began, put back to roll back to it.
    """

    def __init__(self, store: MemoryStore):
        super().__init__()
        self.store = store
        self.staged: dict[str, int] = {}  # name -> the change not yet committed
        self.marks: dict[str, dict[str, int]] = {}  # savepoint -> what was staged when it began

    def value(self, name: str) -> int:
        """The number `name` as this unit of work sees it: committed, plus its own changes (0 if never set)."""
        return self.store.values.get(name, 0) + self.staged.get(name, 0)

    def add(self, name: str, delta: int) -> int:
        """Change the number `name` by `delta` with the commit; return its value as this unit of work sees it."""
        for savepoint in self.pending():  # P17: the savepoints asked for so far begin here
            self.marks[savepoint] = dict(self.staged)
        self.staged[name] = self.staged.get(name, 0) + delta
        return self.value(name)

    async def rollback_to(self, name: str) -> None:
        self.staged = self.marks.pop(name)

    async def commit(self) -> None:
        staged, self.staged = self.staged, {}
        if self.completion is not None:
            key, fingerprint, outcome = self.completion
            record = self.store.records.get(key)
            if record is None or record.status != "running" or record.fingerprint != fingerprint:
                return  # P18: fenced off, and with it every change staged here
            record.status, record.owner, record.outcome = "completed", None, outcome
            record.deadline = self.store.clock() + self.store.limits.retention  # P8: from the completion
            self.store.expiry_order.append(key)  # at the back: completion order is expiry order
            self.completed = True
        for name, delta in staged.items():
            self.store.values[name] = self.store.values.get(name, 0) + delta

    async def rollback(self) -> None:
        self.staged = {}
