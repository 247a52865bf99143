"""The benchmark's instruments in a 2.x server: count its store's round trips, or undo one tuning choice of its store.

benchmarks/ starts some servers with this folder first on PYTHONPATH; Python imports
`sitecustomize` at start-up, before the server's code, so this runs in those processes
and in no other (tests/faults/sitecustomize.py works the same way). It does nothing
unless one of its variables is set. Nothing in the package is edited: every wrapper
goes around a public function or class of the driver or the store, from outside.

    SEP3182_BENCH_TRIPS=PATH    append one line to PATH for every trip the store makes:
                                `sqlite loop|thread WORD` for each statement SQLite runs (on
                                the event loop, or in a worker thread), `thread` for each
                                hop to a worker thread (anyio.to_thread.run_sync), `pg
                                METHOD WORD` for each asyncpg call that goes to the server
    SEP3182_BENCH_UNDO=CHOICE   run the store without one of its tuning choices:
        claim-in-thread         SQLite: no claim on the event loop; every claim takes the
                                store's own other path, a worker thread on the writer
        synchronous-normal      SQLite: the writer commits with synchronous=NORMAL, not FULL
        eager-savepoints        SQLite and PostgreSQL: a nested unit of work (the tool's,
                                inside the layer's) is sent at once, in a trip of its own,
                                instead of with the next statement

Each line is written with one os.write on a file opened O_APPEND, before the call that
made it returns, so the bench reads every trip of a call once its response is in.
"""

import os
import threading

TRIPS = os.environ.get("SEP3182_BENCH_TRIPS")
UNDO = os.environ.get("SEP3182_BENCH_UNDO")
UNDOABLE = {"claim-in-thread", "synchronous-normal", "eager-savepoints"}

if UNDO is not None and UNDO not in UNDOABLE:
    raise SystemExit(f"instruments: SEP3182_BENCH_UNDO={UNDO!r} is none of {sorted(UNDOABLE)}")


def count_trips(path: str) -> None:
    """Wrap SQLite's connections, anyio's worker-thread hop and asyncpg's calls so each trip writes a line."""
    import sqlite3

    import anyio.to_thread
    import asyncpg.connection

    trips = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def note(line: str) -> None:
        os.write(trips, (line + "\n").encode())

    def head(sql: str) -> str:
        """The first word of each statement sent: "BEGIN+SAVEPOINT" for two in one trip."""
        return "+".join(part.split()[0] for part in sql.split(";") if part.strip())

    class CountedConnection(sqlite3.Connection):
        def execute(self, sql, *parameters):
            where = "loop" if threading.current_thread() is threading.main_thread() else "thread"
            note(f"sqlite {where} {head(sql)}")
            return super().execute(sql, *parameters)

    connect = sqlite3.connect

    def counted_connect(*args, **kwargs):
        return connect(*args, factory=CountedConnection, **kwargs)

    sqlite3.connect = counted_connect

    run_sync = anyio.to_thread.run_sync

    async def counted_run_sync(*args, **kwargs):
        note("thread")
        return await run_sync(*args, **kwargs)

    anyio.to_thread.run_sync = counted_run_sync

    # Each of these sends its statement and waits for the answer: one round trip, once
    # the statement is in asyncpg's cache (the bench counts after a warm-up). The pool's
    # proxies look them up on the class, so the pool's own calls are counted too.
    def counted(method):
        async def call(self, query, *args, **kwargs):
            note(f"pg {method.__name__} {head(query)}")
            return await method(self, query, *args, **kwargs)

        return call

    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        setattr(asyncpg.connection.Connection, name, counted(getattr(asyncpg.connection.Connection, name)))


def undo(choice: str) -> None:
    """Undo one tuning choice of the stores, by wrapping what the store calls, as the store's other path would run."""
    import sqlite3

    from mcp_idempotency import stores
    from mcp_idempotency.stores import sqlite

    if choice == "claim-in-thread":
        # The store claims on the event loop first and, when SQLite says "locked", in a
        # worker thread on its writer: a loop connection that always says "locked" leaves it that path.
        claim_on = sqlite.SQLiteStore.claim_on

        def claim_aside(self, db, key, fingerprint, principal):
            if db is self.on_loop:
                raise sqlite3.OperationalError("database is locked (instruments: claim-in-thread)")
            return claim_on(self, db, key, fingerprint, principal)

        sqlite.SQLiteStore.claim_on = claim_aside
    elif choice == "synchronous-normal":
        connect = sqlite.connect
        sqlite.connect = lambda path, wait_seconds, synchronous: connect(path, wait_seconds, "NORMAL")
    else:  # eager-savepoints
        # A savepoint is sent with the next statement; one read through the unit of work's
        # own interface, at once, sends it in a trip of its own, as an eager savepoint would.
        from mcp_idempotency_demo import ledger

        enter = stores.UnitOfWork.__aenter__

        async def eager_enter(self):
            tx = await enter(self)
            if self.outer is not None:
                await ledger.read(tx)
            return tx

        stores.UnitOfWork.__aenter__ = eager_enter


if TRIPS:
    count_trips(TRIPS)
if UNDO:
    undo(UNDO)
