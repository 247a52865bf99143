"""Where the idempotency records and the demo's ledger live, shared by every instance (P15).

One interface, three stores, chosen by URL:

    memory                 this process's dicts: a retry that lands on another instance, or
                           after a restart, finds nothing (SEP L2's failure, offered to show it)
    sqlite:PATH            one file: several processes on one machine (the default)
    postgresql://...       one server: several machines; its clock is the only clock (P19)

Every store answers the same four questions the dispatch layer asks, in order:

    claim(key, fingerprint)   P16, P18: take the key in one atomic step, or say who holds it
    transaction()             P17: a unit of work; the tool's ledger write joins the one the
                              dispatch layer opened, so the charge and the record commit together
    tx.complete(...)          P6, P18: record the outcome, unless the claim was lost (fencing)
    (retention and bound)     P8, P9: expired records are dropped and treated as absent on
                              every claim; a claim that would overfill the store is refused

The store holds outcomes as the text it was given; what they mean is the server's business.
"""

import contextvars
import fcntl
import sqlite3
import time
import uuid
from abc import ABC, abstractmethod
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NamedTuple

import anyio
import anyio.to_thread

# ----------------------------------------------------------------------------
# What a claim returns
# ----------------------------------------------------------------------------


class Won(NamedTuple):
    """This call holds the key: it may run the tool. `owner` is its fencing token (P18)."""

    owner: str


class Held(NamedTuple):
    """Another call holds the key (P4): its fingerprint, and its outcome once it completed."""

    fingerprint: bytes
    outcome: str | None  # None: still running, within its lease


class Full(NamedTuple):
    """P9: the store holds as many live records as it may; a new key is refused."""


@dataclass(frozen=True)
class Limits:
    """The windows and the bound every store enforces (P8, P9, P18)."""

    retention: float  # seconds a completed record is replayed
    lease: float  # seconds a claim is held before a retry with the same fingerprint may take over
    max_records: int  # live records at most, running or completed


def new_owner() -> str:
    """A fencing token: unguessable and never reused, so a lost claim cannot complete (P18)."""
    return uuid.uuid4().hex


# The unit of work open in this task, if any. The dispatch layer opens one around a
# keyed tool call; the tool's own `transaction()` then joins it rather than committing
# on its own, as nested atomic() blocks do in Django. So a tool holds no idempotency
# code, and still its write commits, or rolls back, with the record (P17).
_open_transaction: contextvars.ContextVar["Transaction | None"] = contextvars.ContextVar("open", default=None)


class Transaction(ABC):
    """The statements of one unit of work; each store says how they run."""

    @abstractmethod
    async def charge(self, amount: int) -> int:
        """Add one charge to the ledger; return the new balance."""

    @abstractmethod
    async def ledger(self) -> dict[str, int]:
        """The ledger: {"balance": ..., "charges": ...}."""

    @abstractmethod
    async def reset_ledger(self) -> None:
        """Zero the ledger; the idempotency records are left alone."""

    @abstractmethod
    async def complete(self, key: str, owner: str, outcome: str) -> bool:
        """P6, P8, P18: record the outcome and open its window, if `owner` still holds the key."""

    @abstractmethod
    async def commit(self) -> None:
        """Make every statement of this unit of work durable, together."""

    @abstractmethod
    async def rollback(self) -> None:
        """Undo every statement of this unit of work."""


class Store(ABC):
    """A place for records and ledger that every instance of the server shares (or not: memory)."""

    url: str

    def __init__(self, limits: Limits):
        self.limits = limits

    @abstractmethod
    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        """P8, P9, P16, P18: drop expired records, then take the key atomically or report its holder."""

    @abstractmethod
    def begin(self) -> Transaction:
        """A new unit of work, not yet started."""

    async def close(self) -> None:
        """Give back connections and files."""

    @asynccontextmanager
    async def transaction(self):
        """P17: a unit of work that commits on success and rolls back on any error; nests."""
        joined = _open_transaction.get()
        if joined is not None:
            yield joined
            return
        tx = self.begin()
        token = _open_transaction.set(tx)
        try:
            yield tx
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled caller must still release the store
                await tx.rollback()
            raise
        else:
            with anyio.CancelScope(shield=True):
                await tx.commit()
        finally:
            _open_transaction.reset(token)


# ----------------------------------------------------------------------------
# memory: one process's dicts
# ----------------------------------------------------------------------------


@dataclass
class MemoryRecord:
    fingerprint: bytes
    owner: str | None
    deadline: float  # running: the lease's end; completed: the retention window's end
    outcome: str | None = None


class MemoryStore(Store):
    """Records and ledger in this process only: what SEP L2 says does not satisfy the guarantee."""

    url = "memory"

    def __init__(self, limits: Limits, clock=time.monotonic):
        super().__init__(limits)
        self.clock = clock
        self.records: dict[str, MemoryRecord] = {}
        self.balance = self.charges = 0

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        # No `await` in here: on one event loop the look-up and the write are one step (P16).
        now = self.clock()
        self.records = {k: r for k, r in self.records.items() if r.outcome is None or r.deadline > now}  # P8
        record = self.records.get(key)
        if record is not None and not (record.outcome is None and record.deadline <= now
                                       and record.fingerprint == fingerprint):  # P18: a passed lease
            return Held(record.fingerprint, record.outcome)
        if record is None and len(self.records) >= self.limits.max_records:
            return Full()
        owner = new_owner()
        self.records[key] = MemoryRecord(fingerprint, owner, now + self.limits.lease)
        return Won(owner)

    def begin(self) -> Transaction:
        return MemoryTransaction(self)


class MemoryTransaction(Transaction):
    """Ledger changes wait here until commit, so a fenced completion can drop them (P17, P18)."""

    def __init__(self, store: MemoryStore):
        self.store = store
        self.pending_balance = self.pending_charges = 0

    async def charge(self, amount: int) -> int:
        self.pending_balance += amount
        self.pending_charges += 1
        return self.store.balance + self.pending_balance

    async def ledger(self) -> dict[str, int]:
        return {"balance": self.store.balance + self.pending_balance,
                "charges": self.store.charges + self.pending_charges}

    async def reset_ledger(self) -> None:
        self.pending_balance, self.pending_charges = -self.store.balance, -self.store.charges

    async def complete(self, key: str, owner: str, outcome: str) -> bool:
        record = self.store.records.get(key)
        if record is None or record.owner != owner or record.outcome is not None:
            return False
        record.owner, record.outcome = None, outcome
        record.deadline = self.store.clock() + self.store.limits.retention
        return True

    async def commit(self) -> None:
        self.store.balance += self.pending_balance
        self.store.charges += self.pending_charges

    async def rollback(self) -> None:
        pass


# ----------------------------------------------------------------------------
# sqlite: one file, several processes on one machine
# ----------------------------------------------------------------------------

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_records (
    key          TEXT PRIMARY KEY,
    fingerprint  BLOB NOT NULL,
    owner        TEXT,           -- the fencing token of the claim that holds it; NULL once completed
    lease_until  REAL,           -- running: when a retry may take over (P18)
    outcome      TEXT,           -- NULL while running
    expires_at   REAL            -- completed: when the retention window closes (P8)
);
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at);
CREATE TABLE IF NOT EXISTS ledger (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    balance  INTEGER NOT NULL,
    charges  INTEGER NOT NULL
);
INSERT OR IGNORE INTO ledger VALUES (1, 0, 0);
"""

# P16: the claim is this one statement: an insert that fails over to an update only
# where a retry may take over a passed lease with the same fingerprint (P18). It
# returns a row exactly when this call now holds the key.
SQLITE_CLAIM = """
INSERT INTO idempotency_records (key, fingerprint, owner, lease_until)
VALUES (:key, :fingerprint, :owner, :now + :lease)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until
WHERE idempotency_records.outcome IS NULL
  AND idempotency_records.lease_until <= :now
  AND idempotency_records.fingerprint = excluded.fingerprint
RETURNING owner
"""

SQLITE_COMPLETE = """
UPDATE idempotency_records
SET outcome = :outcome, expires_at = :now + :retention, owner = NULL, lease_until = NULL
WHERE key = :key AND owner = :owner AND outcome IS NULL
"""


def connect_sqlite(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (we say BEGIN ourselves), in WAL, waiting on locks."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout = 10000")  # another process's write: wait, do not fail
    db.execute("PRAGMA synchronous = NORMAL")  # WAL: survives a killed process; an OS crash may lose the last commits
    return db


def create_sqlite_schema(path: str) -> None:
    """Create the file and its tables once, however many processes start at the same moment."""
    # Switching a new file to WAL fails with "database is locked" when several
    # processes try at once, even with a busy timeout: take turns on a lock file.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        db = connect_sqlite(path)
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(SQLITE_SCHEMA)
        db.close()


class SQLiteStore(Store):
    """One SQLite file. Every call runs in a worker thread: a lock held by another
    process must stall that thread, never the event loop."""

    def __init__(self, path: str, limits: Limits, clock=time.time):
        super().__init__(limits)
        self.url = f"sqlite:{path}"
        self.clock = clock  # the machine's clock: every process on it reads the same one
        create_sqlite_schema(path)
        # One connection per process, one unit of work at a time on it: SQLite lets one
        # writer in at a time anyway, so queueing here costs nothing, and a writer that
        # waits here holds no worker thread.
        self.db = connect_sqlite(path)
        self.turn = anyio.Lock()

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        async with self.turn:
            return await anyio.to_thread.run_sync(self._claim, key, fingerprint)

    def _claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        """P8, P9, P16, P18 in one write transaction (BEGIN IMMEDIATE: no other writer meanwhile)."""
        db, now = self.db, self.clock()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM idempotency_records WHERE expires_at <= ?", (now,))  # P8
            owner = new_owner()
            won = db.execute(SQLITE_CLAIM, {"key": key, "fingerprint": fingerprint, "owner": owner,
                                            "now": now, "lease": self.limits.lease}).fetchone()
            if won is None:
                row = db.execute("SELECT fingerprint, outcome FROM idempotency_records WHERE key = ?",
                                 (key,)).fetchone()
                db.execute("COMMIT")  # keep the purge
                return Held(row[0], row[1])
            # P9: a takeover adds no row, so only a new key can push the count past the bound.
            if db.execute("SELECT count(*) FROM idempotency_records").fetchone()[0] > self.limits.max_records:
                db.execute("ROLLBACK")
                return Full()
            db.execute("COMMIT")
            return Won(owner)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def begin(self) -> Transaction:
        return SQLiteTransaction(self)


class SQLiteTransaction(Transaction):
    """BEGIN IMMEDIATE at the first statement, not before: a tool that waits before it
    writes (a slow payment processor) keeps no other writer waiting meanwhile."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.began = False

    async def _run(self, statement):
        """Run `statement(db)` in a worker thread, inside this unit of work's transaction."""
        if not self.began:
            await self.store.turn.acquire()
            self.began = True
            first = statement

            def statement(db):
                db.execute("BEGIN IMMEDIATE")
                return first(db)

        return await anyio.to_thread.run_sync(statement, self.store.db)

    async def charge(self, amount: int) -> int:
        return await self._run(lambda db: db.execute(
            "UPDATE ledger SET balance = balance + ?, charges = charges + 1 RETURNING balance",
            (amount,)).fetchone()[0])

    async def ledger(self) -> dict[str, int]:
        balance, charges = await self._run(lambda db: db.execute("SELECT balance, charges FROM ledger").fetchone())
        return {"balance": balance, "charges": charges}

    async def reset_ledger(self) -> None:
        await self._run(lambda db: db.execute("UPDATE ledger SET balance = 0, charges = 0"))

    async def complete(self, key: str, owner: str, outcome: str) -> bool:
        parameters = {"key": key, "owner": owner, "outcome": outcome,
                      "now": self.store.clock(), "retention": self.store.limits.retention}
        return await self._run(lambda db: db.execute(SQLITE_COMPLETE, parameters).rowcount == 1)

    async def _end(self, statement: str) -> None:
        if self.began:
            try:
                await anyio.to_thread.run_sync(self.store.db.execute, statement)
            finally:
                self.store.turn.release()

    async def commit(self) -> None:
        await self._end("COMMIT")

    async def rollback(self) -> None:
        await self._end("ROLLBACK")


# ----------------------------------------------------------------------------
# postgresql: one server, several machines
# ----------------------------------------------------------------------------

POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_records (
    key          text PRIMARY KEY,
    fingerprint  bytea NOT NULL,
    owner        text,
    lease_until  timestamptz,
    outcome      text,           -- text, not jsonb: a replay is the recorded bytes (P6)
    expires_at   timestamptz
);
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at);
CREATE TABLE IF NOT EXISTS ledger (
    id       integer PRIMARY KEY CHECK (id = 1),
    balance  bigint NOT NULL,
    charges  bigint NOT NULL
);
INSERT INTO ledger VALUES (1, 0, 0) ON CONFLICT DO NOTHING;
"""

# P19: every time below is the database's clock_timestamp(), never an instance's
# clock, so instances need not agree on the time. The claim is one statement (P16).
POSTGRES_CLAIM = """
INSERT INTO idempotency_records (key, fingerprint, owner, lease_until)
VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4))
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until
WHERE idempotency_records.outcome IS NULL
  AND idempotency_records.lease_until <= clock_timestamp()
  AND idempotency_records.fingerprint = excluded.fingerprint
RETURNING owner
"""

POSTGRES_COMPLETE = """
UPDATE idempotency_records
SET outcome = $3, expires_at = clock_timestamp() + make_interval(secs => $4), owner = NULL, lease_until = NULL
WHERE key = $1 AND owner = $2 AND outcome IS NULL
"""


class PostgresStore(Store):
    """One PostgreSQL database, through asyncpg's connection pool."""

    def __init__(self, url: str, limits: Limits, pool):
        super().__init__(limits)
        self.url, self.pool = url, pool

    @classmethod
    async def open(cls, url: str, limits: Limits) -> "PostgresStore":
        import asyncpg  # optional: only this store needs it (sdk2/requirements-postgres.txt)

        pool = await asyncpg.create_pool(url, min_size=1, max_size=10)
        async with pool.acquire() as db, db.transaction():
            # Instances starting together would race on CREATE TABLE IF NOT EXISTS
            # (a unique violation in pg_type): take turns on an advisory lock.
            await db.execute("SELECT pg_advisory_xact_lock(3182)")
            await db.execute(POSTGRES_SCHEMA)
        return cls(url, limits, pool)

    async def close(self) -> None:
        await self.pool.close()

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        async with self.pool.acquire() as db:
            tx = db.transaction()
            await tx.start()
            try:
                await db.execute("DELETE FROM idempotency_records WHERE expires_at <= clock_timestamp()")  # P8
                owner = await db.fetchval(POSTGRES_CLAIM, key, fingerprint, new_owner(), self.limits.lease)
                if owner is None:
                    # A new statement, so a new snapshot: it sees a record that another
                    # instance committed while our insert waited on it.
                    row = await db.fetchrow(
                        "SELECT fingerprint, outcome FROM idempotency_records WHERE key = $1", key)
                    await tx.commit()
                    return Held(bytes(row["fingerprint"]), row["outcome"])
                # P9. Claims that commit at the same instant on several instances do not see
                # each other's rows, so the bound can be passed by that many.
                if await db.fetchval("SELECT count(*) FROM idempotency_records") > self.limits.max_records:
                    await tx.rollback()
                    return Full()
                await tx.commit()
                return Won(owner)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await tx.rollback()
                raise

    def begin(self) -> Transaction:
        return PostgresTransaction(self)


class PostgresTransaction(Transaction):
    """A pooled connection and BEGIN at the first statement, as for SQLite."""

    def __init__(self, store: PostgresStore):
        self.store = store
        self.db = self.tx = None

    async def _connection(self):
        if self.db is None:
            self.db = await self.store.pool.acquire()
            self.tx = self.db.transaction()
            await self.tx.start()
        return self.db

    async def charge(self, amount: int) -> int:
        db = await self._connection()
        return await db.fetchval(
            "UPDATE ledger SET balance = balance + $1, charges = charges + 1 RETURNING balance", amount)

    async def ledger(self) -> dict[str, int]:
        db = await self._connection()
        return dict(await db.fetchrow("SELECT balance, charges FROM ledger"))

    async def reset_ledger(self) -> None:
        db = await self._connection()
        await db.execute("UPDATE ledger SET balance = 0, charges = 0")

    async def complete(self, key: str, owner: str, outcome: str) -> bool:
        db = await self._connection()
        return await db.execute(POSTGRES_COMPLETE, key, owner, outcome, self.store.limits.retention) == "UPDATE 1"

    async def _end(self, finish) -> None:
        if self.db is not None:
            try:
                await finish()
            finally:
                await self.store.pool.release(self.db)

    async def commit(self) -> None:
        await self._end(lambda: self.tx.commit())

    async def rollback(self) -> None:
        await self._end(lambda: self.tx.rollback())


# ----------------------------------------------------------------------------
# Choosing a store
# ----------------------------------------------------------------------------


@asynccontextmanager
async def open_store(url: str, limits: Limits):
    """The store a URL names: memory, sqlite:PATH or postgresql://...; closed on exit."""
    if url == "memory":
        store = MemoryStore(limits)
    elif url.startswith("sqlite:"):
        store = SQLiteStore(url.removeprefix("sqlite:"), limits)
    elif url.startswith(("postgresql:", "postgres:")):
        store = await PostgresStore.open(url, limits)
    else:
        raise ValueError(f"unknown store {url!r}: use memory, sqlite:PATH or postgresql://...")
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
