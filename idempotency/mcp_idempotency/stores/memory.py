"""memory: one process's dicts, what rule L2 says does not satisfy the guarantee (offered to show why)."""

import time
from collections import deque
from dataclasses import dataclass

from . import Full, Held, Limits, Store, Transaction, Won, may_take, new_owner


@dataclass
class Record:
    fingerprint: bytes
    status: str  # "running" or "completed"
    deadline: float  # running: the lease's end (P18); completed: the retention window's end (P8)
    owner: str | None = None  # running: the claim's token, so only it gives the key back (P6')
    outcome: str | None = None  # completed: what is replayed


class MemoryStore(Store):
    """Records and ledger in this process only."""

    url = "memory"

    def __init__(self, limits: Limits, clock=time.monotonic):
        super().__init__(limits)
        self.clock = clock
        self.records: dict[str, Record] = {}
        # Completed keys in the order they completed, which is the order they expire
        # in: a purge only ever looks at the front (P8).
        self.expiry_order: deque[str] = deque()
        self.balance = self.charges = 0

    def purge(self) -> None:
        """P8, P9: drop the completed records whose window has passed; called only when the store is full."""
        now = self.clock()
        while self.expiry_order:
            record = self.records.get(self.expiry_order[0])
            if record is not None and record.status == "completed" and record.deadline > now:
                return
            key = self.expiry_order.popleft()
            if record is not None and record.status == "completed":
                del self.records[key]

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        # No `await` in here: on one event loop the look-up and the write are one step (P16).
        now = self.clock()
        record = self.records.get(key)
        if record is not None and not may_take(record.status, record.fingerprint, record.deadline <= now, fingerprint):
            return Held(record.fingerprint, record.outcome)  # replay, conflict or in progress
        if record is None and len(self.records) >= self.limits.max_records:
            self.purge()
            if len(self.records) >= self.limits.max_records:
                return Full()
        owner = new_owner()
        self.records[key] = Record(fingerprint, "running", now + self.limits.lease, owner)
        return Won(owner)

    async def release(self, key: str, owner: str) -> None:
        record = self.records.get(key)
        if record is not None and record.status == "running" and record.owner == owner:
            del self.records[key]

    def begin(self) -> Transaction:
        return MemoryTransaction(self)


class MemoryTransaction(Transaction):
    """Ledger changes wait here until commit, so a fenced completion can drop them (P17, P18)."""

    def __init__(self, store: MemoryStore):
        super().__init__()
        self.store = store
        self.balance = self.charges = 0  # the changes not yet committed
        self.marks: dict[str, tuple[int, int]] = {}  # savepoint -> the changes when it was sent

    def changes(self) -> None:
        """The next statement: the savepoints asked for so far begin here."""
        for statement in self.pending():
            self.marks[statement.removeprefix("SAVEPOINT ")] = (self.balance, self.charges)

    async def rollback_to(self, name: str) -> None:
        self.balance, self.charges = self.marks.pop(name)

    async def charge(self, amount: int) -> int:
        self.changes()
        self.balance += amount
        self.charges += 1
        return self.store.balance + self.balance

    async def ledger(self) -> dict[str, int]:
        self.changes()
        return {"balance": self.store.balance + self.balance, "charges": self.store.charges + self.charges}

    async def reset_ledger(self) -> None:
        self.changes()
        self.balance, self.charges = -self.store.balance, -self.store.charges

    async def commit(self) -> None:
        if self.completion is not None:
            key, fingerprint, outcome = self.completion
            record = self.store.records.get(key)
            if record is None or record.status != "running" or record.fingerprint != fingerprint:
                await self.rollback()
                return
            record.status, record.owner, record.outcome = "completed", None, outcome
            record.deadline = self.store.clock() + self.store.limits.retention  # P8: from the completion
            self.store.expiry_order.append(key)  # at the back: completion order is expiry order
            self.completed = True
        self.store.balance += self.balance
        self.store.charges += self.charges
        self.balance = self.charges = 0

    async def rollback(self) -> None:
        self.balance = self.charges = 0
