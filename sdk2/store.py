"""Where the idempotency records and the demo's ledger live, shared by every instance (P15).

One interface, three stores, chosen by URL:

    memory                 this process's dicts: a retry that lands on another instance, or
                           after a restart, finds nothing (SEP L2's failure, offered to show it)
    sqlite:PATH            one file: several processes on one machine (the default)
    postgresql://...       one server: several machines; its clock is the only clock (P19)

Every store answers the two things the dispatch layer asks:

    claim(key, fingerprint)   P4, P16, P18: the record that holds the key (read first, with
                              no lock, so most retries cost a read), or else the key taken in
                              one atomic step, or a takeover of a claim whose lease passed
    transaction()             P17: a unit of work; the tool's ledger write joins the one the
                              dispatch layer opened, and tx.commit_with_record() commits the
                              charge and the completed record together, or neither (fencing)

Retention and the bound (P8, P9) hold in all three: an expired record reads as absent and
is dropped by the next claim, and a claim that would overfill the store is refused.
The store keeps outcomes as the text it was given; what they mean is the server's business.
"""

import contextvars
import fcntl
import itertools
import sqlite3
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NamedTuple

import anyio
import anyio.to_thread

# ----------------------------------------------------------------------------
# What a look-up and a claim return
# ----------------------------------------------------------------------------


class Won(NamedTuple):
    """This call holds the key: it may run the tool. `owner` is its fencing token (P18)."""

    owner: str


class Held(NamedTuple):
    """A record holds the key (P4): its fingerprint, and its outcome once completed."""

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


# A fencing token names one claim, and is never reused by any instance: this
# process's random name and a count. It never leaves the server, so it need not be
# secret, and counting is cheaper than drawing 128 random bits for every claim.
PROCESS = uuid.uuid4().hex
claims_made = itertools.count()


def new_owner() -> str:
    """P18: a fencing token no other claim has, so a claim taken over cannot complete."""
    return f"{PROCESS}-{next(claims_made)}"


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
    async def commit_with_record(self, key: str, owner: str, outcome: str) -> bool:
        """P17, P18: record the outcome (opening its window, P8) and commit it with every
        statement of this unit of work, if `owner` still holds the key; else roll all back."""

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
        """P4, P8, P9, P16, P18: the record that holds `key` (an expired one counts as absent,
        a running one whose lease passed is taken over by the same request), or the key taken."""

    @abstractmethod
    async def release(self, key: str, owner: str) -> None:
        """P6': give the key back (drop its running record) if `owner` still holds it, so a retry runs anew."""

    @abstractmethod
    def begin(self) -> Transaction:
        """A new unit of work, not yet started."""

    async def close(self) -> None:
        """Give back connections and files."""

    def transaction(self) -> "UnitOfWork":
        """P17: a unit of work that commits on success and rolls back on any error; nests."""
        return UnitOfWork(self)


class UnitOfWork:
    """`async with store.transaction() as tx:` the transaction open in this task if there is
    one (it is joined), else a new one, committed on success and rolled back on any error."""

    def __init__(self, store: Store):
        self.store = store

    async def __aenter__(self) -> Transaction:
        self.joined = _open_transaction.get()
        if self.joined is not None:
            return self.joined
        self.tx = self.store.begin()
        self.token = _open_transaction.set(self.tx)
        return self.tx

    async def __aexit__(self, error_type, error, traceback) -> None:
        if self.joined is not None:
            return
        _open_transaction.reset(self.token)
        with anyio.CancelScope(shield=True):  # a cancelled caller must still release the store
            if error_type is None:
                await self.tx.commit()
            else:
                await self.tx.rollback()


# ----------------------------------------------------------------------------
# memory: one process's dicts
# ----------------------------------------------------------------------------


@dataclass
class MemoryRecord:
    fingerprint: bytes
    owner: str | None  # the claim's fencing token while running; None once completed
    deadline: float  # running: the lease's end; completed: the retention window's end
    outcome: str | None = None


class MemoryStore(Store):
    """Records and ledger in this process only: what SEP L2 says does not satisfy the guarantee."""

    url = "memory"

    def __init__(self, limits: Limits, clock=time.monotonic):
        super().__init__(limits)
        self.clock = clock
        self.running: dict[str, MemoryRecord] = {}
        self.completed: dict[str, MemoryRecord] = {}
        # Completed keys in the order they completed, which is the order they expire
        # in: expiry only ever looks at the front (P8).
        self.expiry_order: deque[str] = deque()
        self.balance = self.charges = 0

    def forget_expired(self) -> None:
        """P8: drop the completed records whose window has passed."""
        now = self.clock()
        while self.expiry_order and self.completed[self.expiry_order[0]].deadline <= now:
            del self.completed[self.expiry_order.popleft()]

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        # No `await` in here: on one event loop the look-up and the write are one step (P16).
        self.forget_expired()
        record = self.running.get(key) or self.completed.get(key)
        taken_over = (record is not None and record.outcome is None and record.deadline <= self.clock()
                      and record.fingerprint == fingerprint)  # P18: a passed lease, the same request
        if record is not None and not taken_over:
            return Held(record.fingerprint, record.outcome)
        if record is None and len(self.running) + len(self.completed) >= self.limits.max_records:
            return Full()
        owner = new_owner()
        self.running[key] = MemoryRecord(fingerprint, owner, self.clock() + self.limits.lease)
        return Won(owner)

    async def release(self, key: str, owner: str) -> None:
        record = self.running.get(key)
        if record is not None and record.owner == owner:
            del self.running[key]

    def begin(self) -> Transaction:
        return MemoryTransaction(self)


class MemoryTransaction(Transaction):
    """Ledger changes wait here until commit, so a fenced completion can drop them (P17, P18)."""

    def __init__(self, store: MemoryStore):
        self.store = store
        self.balance = self.charges = 0  # the changes not yet committed

    async def charge(self, amount: int) -> int:
        self.balance += amount
        self.charges += 1
        return self.store.balance + self.balance

    async def ledger(self) -> dict[str, int]:
        return {"balance": self.store.balance + self.balance, "charges": self.store.charges + self.charges}

    async def reset_ledger(self) -> None:
        self.balance, self.charges = -self.store.balance, -self.store.charges

    async def commit_with_record(self, key: str, owner: str, outcome: str) -> bool:
        record = self.store.running.get(key)
        if record is None or record.owner != owner:
            await self.rollback()
            return False
        del self.store.running[key]
        record.owner, record.outcome = None, outcome
        record.deadline = self.store.clock() + self.store.limits.retention
        self.store.completed[key] = record
        self.store.expiry_order.append(key)  # at the back: completion order is expiry order
        await self.commit()
        return True

    async def commit(self) -> None:
        self.store.balance += self.balance
        self.store.charges += self.charges
        self.balance = self.charges = 0

    async def rollback(self) -> None:
        self.balance = self.charges = 0


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
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at) WHERE expires_at IS NOT NULL;
-- P9: how many records there are, kept in step by every claim and purge, so that
-- no claim has to count the table (a count is a walk of every key).
CREATE TABLE IF NOT EXISTS idempotency_record_count (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    n   INTEGER NOT NULL
);
INSERT OR IGNORE INTO idempotency_record_count SELECT 1, count(*) FROM idempotency_records;
CREATE TABLE IF NOT EXISTS ledger (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    balance  INTEGER NOT NULL,
    charges  INTEGER NOT NULL
);
INSERT OR IGNORE INTO ledger VALUES (1, 0, 0);
"""

# P4, P8, P18: the record that holds a key, read with no lock: an expired record
# reads as absent, and a running one whose lease passed says so.
SQLITE_HOLDER = """
SELECT fingerprint, outcome, outcome IS NULL AND lease_until <= :now FROM idempotency_records
WHERE key = :key AND (expires_at IS NULL OR expires_at > :now)
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

SQLITE_NEW_KEY = "SELECT NOT EXISTS (SELECT 1 FROM idempotency_records WHERE key = ?)"
SQLITE_SET_COUNT = "UPDATE idempotency_record_count SET n = ?"

# P6', P18: only the claim's owner may give it back; P9: the count follows.
SQLITE_RELEASE = "DELETE FROM idempotency_records WHERE key = ? AND owner = ? AND outcome IS NULL"
SQLITE_RELEASED = "UPDATE idempotency_record_count SET n = n - ?"

# P18: only the claim's owner may complete it; a claim taken over is fenced off.
SQLITE_COMPLETE = """
UPDATE idempotency_records
SET outcome = :outcome, expires_at = :now + :retention, owner = NULL, lease_until = NULL
WHERE key = :key AND owner = :owner AND outcome IS NULL
"""


WRITE_WAIT_SECONDS = 10  # how long a writer waits for another process's transaction


def connect_sqlite(path: str, wait_seconds: float) -> sqlite3.Connection:
    """A connection in autocommit mode (we say BEGIN ourselves), in WAL, waiting at most
    `wait_seconds` for another process's write lock."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # Set up waiting as a writer does, even for a connection that must never wait
    # later: another process opening or closing the file (a fleet started at once)
    # holds it for a moment, and a set-up that refused to wait would stop this one.
    db.execute(f"PRAGMA busy_timeout = {WRITE_WAIT_SECONDS * 1000}")
    db.execute("PRAGMA synchronous = NORMAL")  # WAL: survives a killed process; an OS crash may lose the last commits
    db.execute(f"PRAGMA busy_timeout = {int(wait_seconds * 1000)}")
    return db


def create_sqlite_schema(path: str) -> None:
    """Create the file and its tables once, however many processes start at the same moment."""
    # Switching a new file to WAL fails with "database is locked" when several
    # processes try at once, even with a busy timeout: take turns on a lock file.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        db = connect_sqlite(path, WRITE_WAIT_SECONDS)
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(SQLITE_SCHEMA)
        db.close()


class SQLiteStore(Store):
    """One SQLite file, in WAL mode, where a reader never waits for a writer.

    A claim runs on the event loop when it can, refusing to wait for any lock: a
    read, and the write only if the key is free. When another writer holds the
    file, it waits in a worker thread instead; and so does every unit of work. A
    lock held by another process stalls a worker thread, never the event loop."""

    def __init__(self, path: str, limits: Limits, clock=time.time):
        super().__init__(limits)
        self.url = f"sqlite:{path}"
        self.clock = clock  # the machine's clock: every process on it reads the same one
        create_sqlite_schema(path)
        self.on_loop = connect_sqlite(path, wait_seconds=0)
        # A checkpoint writes the WAL back with an fsync: let it happen on a commit
        # in a worker thread, never on one made on the event loop.
        self.on_loop.execute("PRAGMA wal_autocheckpoint = 0")
        # One waiting writer per process, one unit of work at a time on it: SQLite
        # lets one writer in at a time anyway, so queueing here costs nothing, and a
        # writer that waits here holds no worker thread.
        self.writer = connect_sqlite(path, WRITE_WAIT_SECONDS)
        self.turn = anyio.Lock()

    async def close(self) -> None:
        self.on_loop.close()
        self.writer.close()

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        try:
            return self._claim(self.on_loop, key, fingerprint)
        except sqlite3.OperationalError:  # "database is locked": another writer has the file; wait aside
            async with self.turn:
                return await anyio.to_thread.run_sync(self._claim, self.writer, key, fingerprint)

    def _claim(self, db: sqlite3.Connection, key: str, fingerprint: bytes) -> Won | Held | Full:
        """P4, P8, P9, P16, P18: a read; then, if the key is free, one write transaction."""
        now = self.clock()
        holder = db.execute(SQLITE_HOLDER, {"key": key, "now": now}).fetchone()
        if holder is not None and not (holder[2] and holder[0] == fingerprint):
            return Held(holder[0], holder[1])  # no write at all: a replay, a conflict, in progress
        db.execute("BEGIN IMMEDIATE")  # no other writer from here to COMMIT: what is read now stays true
        try:
            purged = db.execute("DELETE FROM idempotency_records WHERE expires_at <= ?", (now,)).rowcount  # P8
            # P9: only a new key adds a record (a takeover reuses its row), so only
            # a new key can be refused. This read decides the count, not the claim.
            new_key = db.execute(SQLITE_NEW_KEY, (key,)).fetchone()[0]
            live = db.execute("SELECT n FROM idempotency_record_count").fetchone()[0] - purged
            if new_key and live >= self.limits.max_records:
                db.execute(SQLITE_SET_COUNT, (live,))
                db.execute("COMMIT")  # keep the purge
                return Full()
            db.execute(SQLITE_SET_COUNT, (live + new_key,))
            owner = new_owner()
            won = db.execute(SQLITE_CLAIM, {"key": key, "fingerprint": fingerprint, "owner": owner,
                                            "now": now, "lease": self.limits.lease}).fetchone()
            if won is None:  # another process claimed or completed it between the read and BEGIN
                holder = db.execute(SQLITE_HOLDER, {"key": key, "now": now}).fetchone()
                db.execute("COMMIT")  # keep the purge
                return Held(holder[0], holder[1])
            db.execute("COMMIT")
            return Won(owner)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def release(self, key: str, owner: str) -> None:
        def give_back(db) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(SQLITE_RELEASED, (db.execute(SQLITE_RELEASE, (key, owner)).rowcount,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

        async with self.turn:
            await anyio.to_thread.run_sync(give_back, self.writer)

    def begin(self) -> Transaction:
        return SQLiteTransaction(self)


class SQLiteTransaction(Transaction):
    """BEGIN IMMEDIATE at the first statement, not before: a tool that waits before it
    writes (a slow payment processor) keeps no other writer waiting meanwhile."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.open = False

    async def _run(self, statement):
        """Run `statement(db)` in a worker thread, inside this unit of work's transaction."""
        if not self.open:
            await self.store.turn.acquire()
            self.open = True
            first = statement

            def statement(db):
                db.execute("BEGIN IMMEDIATE")
                return first(db)

        return await anyio.to_thread.run_sync(statement, self.store.writer)

    async def charge(self, amount: int) -> int:
        return await self._run(lambda db: db.execute(
            "UPDATE ledger SET balance = balance + ?, charges = charges + 1 RETURNING balance",
            (amount,)).fetchone()[0])

    async def ledger(self) -> dict[str, int]:
        balance, charges = await self._run(lambda db: db.execute("SELECT balance, charges FROM ledger").fetchone())
        return {"balance": balance, "charges": charges}

    async def reset_ledger(self) -> None:
        await self._run(lambda db: db.execute("UPDATE ledger SET balance = 0, charges = 0"))

    async def commit_with_record(self, key: str, owner: str, outcome: str) -> bool:
        parameters = {"key": key, "owner": owner, "outcome": outcome,
                      "now": self.store.clock(), "retention": self.store.limits.retention}

        def complete(db) -> bool:  # one trip to the worker thread: the update, then COMMIT or ROLLBACK
            completed = db.execute(SQLITE_COMPLETE, parameters).rowcount == 1
            db.execute("COMMIT" if completed else "ROLLBACK")
            return completed


        completed = await self._run(complete)
        self._close()
        return completed

    def _close(self) -> None:
        """Let the next unit of work of this process in."""
        self.open = False
        self.store.turn.release()

    async def _end(self, statement: str) -> None:
        """COMMIT or ROLLBACK, if this unit of work began; a statement that failed may have ended it."""
        if not self.open:
            return
        try:
            if self.store.writer.in_transaction:
                await anyio.to_thread.run_sync(self.store.writer.execute, statement)
        finally:
            self._close()

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
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at) WHERE expires_at IS NOT NULL;
-- P9: how many records there are, kept in step by every claim and purge, so that
-- no claim has to count the table.
CREATE TABLE IF NOT EXISTS idempotency_record_count (
    id  integer PRIMARY KEY CHECK (id = 1),
    n   bigint NOT NULL
);
INSERT INTO idempotency_record_count SELECT 1, count(*) FROM idempotency_records
WHERE NOT EXISTS (SELECT FROM idempotency_record_count) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS ledger (
    id       integer PRIMARY KEY CHECK (id = 1),
    balance  bigint NOT NULL,
    charges  bigint NOT NULL
);
INSERT INTO ledger SELECT 1, 0, 0 WHERE NOT EXISTS (SELECT FROM ledger) ON CONFLICT DO NOTHING;
"""

POSTGRES_SCHEMA_READY = "SELECT to_regprocedure('idempotency_claim(text, bytea, text, float8, bigint)') IS NOT NULL"

# P4, P8, P9, P16, P18 in one statement, so in one round trip and one transaction:
# the record that holds the key, answered with no write; or the key claimed by one
# atomic insert, or taken over once its lease has passed. P19: every time here is
# the database's clock, never an instance's, so instances need not agree on the time.
POSTGRES_CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION idempotency_claim(claim_key text, claim_fingerprint bytea, claim_owner text,
                                             lease_seconds float8, max_records bigint)
RETURNS TABLE (status text, fingerprint bytea, outcome text) LANGUAGE plpgsql AS $$
DECLARE
    holder record;
    held boolean;
    inserted boolean;
    purged bigint;
    live bigint;
BEGIN
    SELECT r.fingerprint, r.outcome, r.outcome IS NULL AND r.lease_until <= now() AS lease_passed INTO holder
    FROM idempotency_records r WHERE r.key = claim_key AND (r.expires_at IS NULL OR r.expires_at > now());
    held := FOUND;
    IF held AND NOT (holder.lease_passed AND holder.fingerprint = claim_fingerprint) THEN
        RETURN QUERY SELECT 'held', holder.fingerprint, holder.outcome;  -- no write at all
        RETURN;
    END IF;
    -- The claim need not wait for the disk: if the database loses it in a crash, the
    -- tool's completion finds no claim and rolls its charge back (P18); that completion
    -- commits durably, with the charge.
    PERFORM set_config('synchronous_commit', 'off', true);
    DELETE FROM idempotency_records r WHERE r.expires_at <= now();  -- P8
    GET DIAGNOSTICS purged = ROW_COUNT;
    -- P9: the count row is locked from here to the commit, so claims of new keys take turns.
    SELECT c.n - purged INTO live FROM idempotency_record_count c FOR UPDATE;
    IF NOT held AND live >= max_records THEN
        UPDATE idempotency_record_count SET n = live;
        RETURN QUERY SELECT 'full', NULL::bytea, NULL::text;
        RETURN;
    END IF;
    INSERT INTO idempotency_records AS r (key, fingerprint, owner, lease_until)
    VALUES (claim_key, claim_fingerprint, claim_owner, now() + make_interval(secs => lease_seconds))
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until
    WHERE r.outcome IS NULL AND r.lease_until <= now() AND r.fingerprint = excluded.fingerprint
    RETURNING r.xmax = 0 INTO inserted;  -- xmax = 0: a new row, not a takeover
    IF NOT FOUND THEN  -- another instance claimed it after our read: a new snapshot sees it
        UPDATE idempotency_record_count SET n = live;
        RETURN QUERY SELECT 'held', r.fingerprint, r.outcome FROM idempotency_records r WHERE r.key = claim_key;
        RETURN;
    END IF;
    UPDATE idempotency_record_count SET n = live + inserted::int;
    RETURN QUERY SELECT 'won', claim_fingerprint, NULL::text;
END
$$
"""

POSTGRES_CLAIM = "SELECT status, fingerprint, outcome FROM idempotency_claim($1, $2, $3, $4, $5)"

# P6', P18: only the claim's owner may give it back; P9: the count follows.
POSTGRES_RELEASE = """
WITH released AS (DELETE FROM idempotency_records WHERE key = $1 AND owner = $2 AND outcome IS NULL RETURNING 1)
UPDATE idempotency_record_count SET n = n - (SELECT count(*) FROM released)
"""

POSTGRES_COMPLETE = """
UPDATE idempotency_records
SET outcome = $3, expires_at = clock_timestamp() + make_interval(secs => $4), owner = NULL, lease_until = NULL
WHERE key = $1 AND owner = $2 AND outcome IS NULL
"""


async def no_reset(_connection) -> None:
    """What a pooled connection needs on release: nothing (see PostgresStore.open)."""


class PostgresStore(Store):
    """One PostgreSQL database, through asyncpg's connection pool."""

    def __init__(self, url: str, limits: Limits, pool):
        super().__init__(limits)
        self.url, self.pool = url, pool

    @classmethod
    async def open(cls, url: str, limits: Limits) -> "PostgresStore":
        import asyncpg  # optional: only this store needs it (sdk2/requirements-postgres.txt)

        # Each connection is used for one transaction at a time and keeps no session
        # state, so the pool need not reset it on release: that is a round trip a use.
        pool = await asyncpg.create_pool(url, min_size=1, max_size=10, reset=no_reset)
        async with pool.acquire() as db:
            # A running instance holds the ledger's row and the records' rows while it
            # charges; CREATE INDEX would lock the whole table behind them. So the
            # schema is created only where it is missing, one instance at a time.
            if not await db.fetchval(POSTGRES_SCHEMA_READY):
                await db.execute("SELECT pg_advisory_lock(3182)")  # instances starting together take turns
                try:
                    if not await db.fetchval(POSTGRES_SCHEMA_READY):  # a new transaction: sees one made meanwhile
                        async with db.transaction():
                            await db.execute(POSTGRES_SCHEMA)
                            await db.execute(POSTGRES_CLAIM_FUNCTION)
                finally:
                    await db.execute("SELECT pg_advisory_unlock(3182)")
        return cls(url, limits, pool)

    async def close(self) -> None:
        await self.pool.close()

    async def claim(self, key: str, fingerprint: bytes) -> Won | Held | Full:
        owner = new_owner()
        async with self.pool.acquire() as db:
            row = await db.fetchrow(POSTGRES_CLAIM, key, fingerprint, owner, self.limits.lease, self.limits.max_records)
        if row["status"] == "won":
            return Won(owner)
        if row["status"] == "full":
            return Full()
        return Held(bytes(row["fingerprint"]), row["outcome"])

    async def release(self, key: str, owner: str) -> None:
        async with self.pool.acquire() as db:
            await db.execute(POSTGRES_RELEASE, key, owner)

    def begin(self) -> Transaction:
        return PostgresTransaction(self)


class PostgresTransaction(Transaction):
    """A pooled connection and BEGIN at the first statement, as for SQLite."""

    def __init__(self, store: PostgresStore):
        self.store = store
        self.db = None

    async def _connection(self):
        if self.db is None:
            self.db = await self.store.pool.acquire()
            await self.db.execute("BEGIN")
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

    async def commit_with_record(self, key: str, owner: str, outcome: str) -> bool:
        db = await self._connection()
        completed = await db.execute(POSTGRES_COMPLETE, key, owner, outcome, self.store.limits.retention) == "UPDATE 1"
        await self._end("COMMIT" if completed else "ROLLBACK")
        return completed

    async def _end(self, statement: str) -> None:
        if self.db is not None:
            db, self.db = self.db, None
            try:
                await db.execute(statement)
            finally:
                await self.store.pool.release(db)

    async def commit(self) -> None:
        await self._end("COMMIT")

    async def rollback(self) -> None:
        await self._end("ROLLBACK")


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
