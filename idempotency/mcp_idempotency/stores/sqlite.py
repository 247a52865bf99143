"""sqlite: one file, shared by several processes on one machine; their clock is the machine's."""

import fcntl
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.to_thread

from ..rules import principal_of
from . import (
    LONGEST_WAIT,
    SCHEMA_VERSION,
    Full,
    Held,
    Limits,
    Misconfigured,
    Store,
    StoreUnavailable,
    Transaction,
    Won,
    may_take,
    must_create,
    must_upgrade,
    new_owner,
)
from .sql import SQLiteStatements, create_tables, failed
from .unit_of_work import Completion, take

__all__ = []

# Whose share a record counts against (rules.principal_name); "" for nobody's (a
# bare key of an earlier version). One definition, for a new file and for the upgrade.
PRINCIPAL = "principal TEXT NOT NULL DEFAULT ''"
SHARE_INDEX = "CREATE INDEX idempotency_records_share ON idempotency_records (principal, deadline)"

# How many records each principal has, live or expired, and how many in all, kept in step by triggers:
# every statement that inserts or deletes a record (a claim, a purge, a release, `forget`, an
# operator's DELETE) keeps them right without remembering to. For a new file and for the upgrade.
SHARES = """
CREATE TABLE idempotency_shares (
    principal  TEXT PRIMARY KEY,
    records    INTEGER NOT NULL
)"""
INSERTED = """
CREATE TRIGGER idempotency_records_inserted AFTER INSERT ON idempotency_records BEGIN
    INSERT INTO idempotency_shares VALUES (NEW.principal, 1)
    ON CONFLICT (principal) DO UPDATE SET records = records + 1;
    UPDATE idempotency_record_count SET n = n + 1;
END"""
DELETED = """
CREATE TRIGGER idempotency_records_deleted AFTER DELETE ON idempotency_records BEGIN
    UPDATE idempotency_shares SET records = records - 1 WHERE principal = OLD.principal;
    DELETE FROM idempotency_shares WHERE principal = OLD.principal AND records = 0;
    UPDATE idempotency_record_count SET n = n - 1;
END"""

# The records and their counts: schema version 4 (PRAGMA user_version). Version 3 had no
# count per principal; 2 held the demo's ledger too and had no principal column; 1 was the
# layout with NULL patterns across columns (see SCHEMA_VERSION in stores/__init__.py).
SCHEMA = f"""
CREATE TABLE idempotency_records (
    key          TEXT PRIMARY KEY,
    {PRINCIPAL},
    fingerprint  BLOB NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'completed')),
    deadline     REAL NOT NULL,  -- running: when a retry may take over; completed: when it expires
    owner        TEXT,           -- running: the claim's token, so only it gives the key back
    outcome      TEXT,           -- completed: what is replayed
    CHECK ((status = 'completed') = (outcome IS NOT NULL))
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (deadline) WHERE status = 'completed';
{SHARE_INDEX};
-- How many records there are, so that no claim has to count the table (a count is a walk of every key).
CREATE TABLE idempotency_record_count (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    n   INTEGER NOT NULL
);
INSERT INTO idempotency_record_count VALUES (1, 0);
{SHARES};
{INSERTED};
{DELETED};
PRAGMA user_version = {SCHEMA_VERSION};
"""

# Version 3 to 4: each principal's records counted once, under the file's write lock, as the triggers then keep them.
SHARES_COUNTED = "INSERT INTO idempotency_shares SELECT principal, count(*) FROM idempotency_records GROUP BY principal"

# What to do with a file of a version that cannot be upgraded in place.
OTHERWISE = "move the file aside or point --store elsewhere"

# The record that holds a key, read with no lock, and whether its
# deadline has passed (an expired record is absent; a passed lease may be taken over).
HOLDER = "SELECT fingerprint, status, outcome, deadline <= :now FROM idempotency_records WHERE key = :key"

# The claim is this one statement, under the write lock: a new key is
# inserted; an existing row is taken only where `may_take` (stores/__init__.py)
# says so, its WHERE clause being that rule in SQL: the deadline passed and the
# record is completed (expired: the key is new again) or running for the same
# request (a takeover). It returns a row exactly when this call now holds the
# key. It trusts no earlier read.
CLAIM = """
INSERT INTO idempotency_records (key, principal, fingerprint, status, deadline, owner)
VALUES (:key, :principal, :fingerprint, 'running', :now + :lease, :owner)
ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, status = 'running', deadline = excluded.deadline,
                                owner = excluded.owner, outcome = NULL
WHERE idempotency_records.deadline <= :now
  AND (idempotency_records.status = 'completed' OR idempotency_records.fingerprint = excluded.fingerprint)
RETURNING owner
"""

COUNT = "SELECT n FROM idempotency_record_count"
RUNNING = "SELECT fingerprint FROM idempotency_records WHERE key = ? AND status = 'running'"
IS_NEW = "SELECT NOT EXISTS (SELECT 1 FROM idempotency_records WHERE key = ?)"

# How many records the principal has, live or expired: while that is within its share, so are its live ones.
SHARE_ROWS = "SELECT coalesce((SELECT records FROM idempotency_shares WHERE principal = ?), 0)"

# A principal near its share first loses its expired completed records, as the store's purge, a batch at a time.
PURGE_MINE = """
DELETE FROM idempotency_records WHERE key IN (
    SELECT key FROM idempotency_records WHERE principal = ? AND status = 'completed' AND deadline <= ?
    ORDER BY deadline LIMIT 1000)
"""

# Once this claim holds the key, does the principal hold more than its share of
# records whose deadline is ahead, the key's own included? A walk of the share index
# alone (it holds both columns read), which stops one past the share.
SHARE_EXCEEDED = """
SELECT count(*) > :share FROM (
    SELECT 1 FROM idempotency_records WHERE principal = :principal AND deadline > :now LIMIT :share + 1)
"""

# A purge runs only when the bound is reached, oldest first, a batch at a time.
PURGE = """
DELETE FROM idempotency_records WHERE key IN (
    SELECT key FROM idempotency_records WHERE status = 'completed' AND deadline <= ? ORDER BY deadline LIMIT 1000)
"""

# Only the claim's holder gives it back.
RELEASE = "DELETE FROM idempotency_records WHERE key = ? AND status = 'running' AND owner = ?"
FORGET = "DELETE FROM idempotency_records WHERE principal = ?"
# The holder, alive, moves its lease on; a claim taken over or given back is no longer its own.
RENEW = "UPDATE idempotency_records SET deadline = ? WHERE key = ? AND status = 'running' AND owner = ?"

# The first completion of a running key for this request wins; any other is fenced off.
COMPLETE = """
UPDATE idempotency_records SET status = 'completed', outcome = :outcome, deadline = :now + :retention, owner = NULL
WHERE key = :key AND status = 'running' AND fingerprint = :fingerprint
"""

# Said when this process's one writer stays taken past the wait: by another unit of work.
WRITER_TAKEN = (
    "SQLite: the file's one writer stayed taken past the store's wait, by another unit of work; "
    "a tool should do slow work before its unit of work's first statement"
)
ROLLED_BACK = "SQLite: it rolled this unit of work back itself (a full disk, an I/O error)"
WHOLE = "unit_of_work"  # the savepoint every unit of work begins with, so a fenced one keeps its renewals


def connect(path: str, wait_seconds: float, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (we say BEGIN ourselves), waiting at most
    `wait_seconds` for another process's write lock."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # Set up waiting, even for a connection that must never wait later: another
    # process opening or closing the file (a fleet started at once) holds it for a
    # moment, and a set-up that refused to wait would stop this one.
    db.execute(f"PRAGMA busy_timeout = {int(LONGEST_WAIT * 1000)}")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.execute(f"PRAGMA busy_timeout = {int(wait_seconds * 1000)}")
    return db


@contextmanager
def schema_turn(path: str) -> Iterator[sqlite3.Connection]:
    """The file, in WAL mode, while this process alone may create or upgrade its tables."""
    # Switching a new file to WAL fails with "database is locked" when several
    # processes try at once, even with a busy timeout: take turns on a lock file.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        db = connect(path, LONGEST_WAIT, "FULL")
        try:
            db.execute("PRAGMA journal_mode = WAL")
            yield db
        finally:
            db.close()


def found_version(db: sqlite3.Connection) -> int:
    """The schema version the file holds: 0 for no tables at all, 1 for the layout before the version was recorded."""
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    tables: int = db.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'idempotency_records'").fetchone()[0]
    return version or min(tables, 1)


def create_schema(path: str, tables: Sequence[str]) -> None:
    """Create the file and its tables once, however many processes start at the same moment, and
    then the tools' own; refuse, in one line, a file that holds another version's tables, or none can hold."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Misconfigured(f"there is no folder {folder} for the SQLite file: create it, or point the store elsewhere")
    try:
        with schema_turn(path) as db:
            if must_create(f"sqlite:{path}", found_version(db), OTHERWISE):
                db.executescript(f"BEGIN IMMEDIATE; {SCHEMA} COMMIT;")
            create_tables(db, tables)
    except (OSError, sqlite3.Error) as error:
        raise Misconfigured(f"the SQLite file {path} cannot be opened ({error}): {OTHERWISE}") from None


def upgrade(path: str) -> int:
    """`mcp-idempotency-store upgrade sqlite:PATH`: version 2 or 3 becomes 4 in place; the version it held.
    From 2, every record gains its principal, read from its key; then each principal's records are
    counted. The demo's ledger stays as it is."""
    if not os.path.exists(path):  # connecting would make an empty file there
        raise FileNotFoundError(f"no such file: {path}")
    with schema_turn(path) as db:
        db.execute("BEGIN IMMEDIATE")  # no other writer while the version is read and moved
        try:
            found = found_version(db)
            if must_upgrade(f"sqlite:{path}", found, OTHERWISE):
                if found == 2:
                    db.create_function("principal_of", 1, principal_of, deterministic=True)
                    db.execute(f"ALTER TABLE idempotency_records ADD COLUMN {PRINCIPAL}")
                    db.execute("UPDATE idempotency_records SET principal = principal_of(key)")
                    db.execute(SHARE_INDEX)
                for statement in (SHARES, INSERTED, DELETED, SHARES_COUNTED):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
    return found


class SQLiteStore(Store):
    """One SQLite file, in WAL mode, where a reader never waits for a writer.

    A claim runs on the event loop when it can, refusing to wait for any lock: a
    read, and the write only if the key is free. When another writer holds the
    file, it waits in a worker thread instead; and so does every unit of work. A
    lock held by another process stalls a worker thread, never the event loop; and
    a writer waits for it `limits.wait` at most."""

    def __init__(self, path: str, limits: Limits, clock: Callable[[], float] = time.time, tables: Sequence[str] = ()):
        super().__init__(limits)
        self.url = f"sqlite:{path}"
        self.clock = clock  # the machine's clock: every process on it reads the same one
        create_schema(path, tables)
        # The claims made on the event loop need not reach the disk at once: a
        # completion's commit syncs the whole log, the claim's frames before it
        # included (the same argument as PostgreSQL's). A claim a crash loses
        # was never told to anyone as an outcome; its completion is then refused.
        self.on_loop = connect(path, wait_seconds=0, synchronous="NORMAL")
        # A checkpoint writes the WAL back with an fsync: let it happen on a commit
        # in a worker thread, never on one made on the event loop.
        self.on_loop.execute("PRAGMA wal_autocheckpoint = 0")
        # A completion the client was told about survives power loss:
        # synchronous=FULL syncs the log at every commit of the writer. (NORMAL, in
        # WAL, may lose the last commits to an OS crash: a client told "Charged"
        # could be charged again.)
        # One waiting writer per process, one unit of work at a time on it: SQLite
        # lets one writer in at a time anyway, so queueing here costs nothing, and a
        # writer that waits here holds no worker thread.
        self.writer = connect(path, limits.wait, synchronous="FULL")
        self.turn = anyio.Lock()
        # Renewals have a connection of their own, so a unit of work never queues
        # behind one; a renewal lost to a crash needs no sync, the holder died with it.
        self.renewer = connect(path, limits.wait, synchronous="NORMAL")
        self.renewing = anyio.Lock()
        # So have the store's own writes that could not be made on the loop (a claim while
        # another writer had the file, a release, a forget): they wait for the file alone, a
        # wait at most, never queued behind this process's units of work for the writer.
        self.aside = connect(path, limits.wait, synchronous="FULL")
        self.asiding = anyio.Lock()
        self.holding: SQLiteTransaction | None = None  # the unit of work holding the writer, once begun

    async def close(self) -> None:
        self.on_loop.close()
        self.writer.close()
        self.renewer.close()
        self.aside.close()

    async def claim(self, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        try:
            try:
                return self.claim_on(self.on_loop, key, fingerprint, principal)
            except sqlite3.OperationalError:  # "database is locked": another writer has the file
                running = self.running(key)
                if running is not None:
                    # A takeover waits for no writer: while one holds the file, the holder's own
                    # renewal may be waiting behind it too, so the key is answered in progress.
                    return running
                async with self.aside_turn():
                    return await anyio.to_thread.run_sync(self.claim_on, self.aside, key, fingerprint, principal)
        except sqlite3.Error as error:  # any other, a malformed file included, is the store failing
            raise failed(error) from error

    def running(self, key: str) -> Held | None:
        """The key's record, if it is running (its lease passed or not), read with no lock."""
        row = self.on_loop.execute(RUNNING, (key,)).fetchone()
        return None if row is None else Held(row[0], None)

    async def take_writer(self) -> None:
        """Take this process's one writer connection, waiting `limits.wait` at most, as for the file's lock."""
        await take(self.turn, self.limits.wait, WRITER_TAKEN)

    @asynccontextmanager
    async def aside_turn(self) -> AsyncIterator[None]:
        """The connection for the store's own writes made aside, for one of them."""
        await take(self.asiding, self.limits.wait, WRITER_TAKEN)
        try:
            yield
        finally:
            self.asiding.release()

    def claim_on(self, db: sqlite3.Connection, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        """A read; then, if the key may be taken, one write transaction."""
        now = self.clock()
        holder = db.execute(HOLDER, {"key": key, "now": now}).fetchone()
        if holder is not None:
            stored, status, outcome, passed = holder
            if not may_take(status, stored, bool(passed), fingerprint):
                return Held(stored, outcome)  # no write at all: a replay, a conflict, in progress
        return self.take(db, key, fingerprint, principal, now)

    def take(
        self, db: sqlite3.Connection, key: str, fingerprint: bytes, principal: str, now: float
    ) -> Won | Held | Full:
        """Under the write lock, the key claimed, or the record that holds it now."""
        db.execute("BEGIN IMMEDIATE")  # no other writer from here to COMMIT: what is read now stays true
        try:
            new: int = db.execute(IS_NEW, (key,)).fetchone()[0]
            if new and db.execute(COUNT).fetchone()[0] >= self.limits.max_records:
                db.execute(PURGE, (now,))  # only a full store purges
                if db.execute(COUNT).fetchone()[0] >= self.limits.max_records:
                    db.execute("COMMIT")  # keep the purge
                    return Full()
            share = self.limits.max_records_per_principal
            # Within its share counting every record of its own, live or not, the principal has room: no walk.
            near = db.execute(SHARE_ROWS, (principal,)).fetchone()[0] + new > share
            if near:
                db.execute(PURGE_MINE, (principal, now))
                db.execute("SAVEPOINT claim")  # a refusal undoes the claim, and keeps the purges
            owner = new_owner()
            claim = {"key": key, "principal": principal, "fingerprint": fingerprint, "owner": owner, "now": now}
            won = db.execute(CLAIM, {**claim, "lease": self.limits.lease}).fetchone()
            if won is None:  # another process claimed or completed it between the read and BEGIN
                holder = db.execute(HOLDER, {"key": key, "now": now}).fetchone()
                db.execute("COMMIT")
                return Held(holder[0], holder[2])
            mine = {"principal": principal, "now": now, "share": share}
            if near and db.execute(SHARE_EXCEEDED, mine).fetchone()[0]:
                # After the claim, so a key another process took meanwhile is answered as held, never as full.
                db.execute("ROLLBACK TO SAVEPOINT claim")
                db.execute("COMMIT")
                return Full()
            db.execute("COMMIT")
            return Won(owner)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def release(self, key: str, owner: str) -> None:
        await self.deleted(RELEASE, (key, owner))

    async def forget(self, principal: str) -> int:
        return await self.deleted(FORGET, (principal,))

    async def renew(self, key: str, owner: str) -> bool:
        if self.holding is not None:
            # A unit of work of this process holds the file's one write lock, so no other process can
            # take the key over until it lets go; it renews the lease just before it does (renewed_in),
            # so the renewal never waits on it. (A claim no longer ours reads as renewed this once.)
            self.holding.renewals.add((key, owner))
            return True

        def extend(db: sqlite3.Connection) -> bool:
            return db.execute(RENEW, (self.clock() + self.limits.lease, key, owner)).rowcount == 1

        try:
            async with self.renewing:
                return await anyio.to_thread.run_sync(extend, self.renewer)
        except sqlite3.Error as error:
            raise failed(error) from error

    async def deleted(self, statement: str, parameters: tuple[str, ...]) -> int:
        """One DELETE, the counts kept in step with it by the file's triggers; how many rows went."""

        def delete(db: sqlite3.Connection) -> int:
            return int(db.execute(statement, parameters).rowcount)

        try:
            async with self.aside_turn():
                return await anyio.to_thread.run_sync(delete, self.aside)
        except sqlite3.Error as error:
            raise failed(error) from error

    def begin(self) -> Transaction:
        return SQLiteTransaction(self)


class SQLiteTransaction(SQLiteStatements):
    """BEGIN IMMEDIATE at the first statement, on this process's one writer connection, held to the end.

    While it holds the file no other process writes, so none takes a claim over: the renewals
    asked for meanwhile (of any claim of this process) are made just before it lets go."""

    def __init__(self, store: SQLiteStore):
        super().__init__()
        self.store = store
        self.renewals: set[tuple[str, str]] = set()  # (key, owner) of each claim to renew before the end

    async def send(self, begin: bool, savepoints: list[str], statement: Callable[[Any], Any]) -> Any:
        if begin:
            await self.store.take_writer()
            try:
                # The store's own writes waiting aside (a claim for another key, a release) go first:
                # each is one short statement, where a unit of work may hold the file for its tool's run.
                async with self.store.aside_turn():
                    pass
            except BaseException:
                self.store.turn.release()
                raise

        def inside(db: sqlite3.Connection) -> Any:
            if begin:
                db.execute("BEGIN IMMEDIATE")
                db.execute(f"SAVEPOINT {WHOLE}")
                self.begun = True
            elif not db.in_transaction:
                raise StoreUnavailable(ROLLED_BACK)
            for name in savepoints:
                db.execute(f"SAVEPOINT {name}")
            return statement(db)

        try:
            return await anyio.to_thread.run_sync(inside, self.store.writer)
        finally:
            if begin and not self.begun:  # BEGIN failed: let the next unit of work of this process in
                self.store.turn.release()
            elif begin:
                self.store.holding = self

    async def finish(self, completion: Completion | None) -> bool:
        if not self.begun:
            await self.send(True, [], lambda db: None)  # a completion with no statement before it: BEGIN for it
        return bool(await self.let_go(lambda db: self.ended_in(db, completion)))

    async def abandon(self) -> None:
        await self.let_go(self.abandoned_in)

    def ended_in(self, db: sqlite3.Connection, completion: Completion | None) -> bool:
        """In the worker thread: the completion kept, or fenced off with every statement; the renewals; COMMIT."""
        if not db.in_transaction:
            raise StoreUnavailable(ROLLED_BACK)
        applied = False
        if completion is not None:
            now, retention = self.store.clock(), self.store.limits.retention
            applied = db.execute(COMPLETE, {**completion._asdict(), "now": now, "retention": retention}).rowcount == 1
            if not applied:  # the key no longer runs for this request: nothing of this unit of work is kept
                db.execute(f"ROLLBACK TO SAVEPOINT {WHOLE}")
        self.renewed_in(db)
        db.execute("COMMIT")
        return applied

    def abandoned_in(self, db: sqlite3.Connection) -> None:
        """In the worker thread: every statement undone, the renewals kept, if SQLite has not rolled back already."""
        if db.in_transaction:
            db.execute(f"ROLLBACK TO SAVEPOINT {WHOLE}")
            self.renewed_in(db)
            db.execute("COMMIT")

    def renewed_in(self, db: sqlite3.Connection) -> None:
        """The leases renewed while this unit of work held the file, moved on now, before it lets go."""
        deadline = self.store.clock() + self.store.limits.lease
        db.executemany(RENEW, [(deadline, key, owner) for key, owner in self.renewals])

    async def let_go(self, ending: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `ending` in the worker thread; whatever happens, the transaction is over and the writer free."""

        def ended(db: sqlite3.Connection) -> Any:
            try:
                return ending(db)
            finally:
                if db.in_transaction:  # the ending failed part way
                    db.execute("ROLLBACK")

        try:
            return await anyio.to_thread.run_sync(ended, self.store.writer)
        finally:
            self.begun = False
            self.store.holding = None
            self.store.turn.release()
