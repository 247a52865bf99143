"""What the SQLite and memory stores share: a tool's statements on an SQLite connection; which errors are whose."""

import re
import sqlite3
from collections.abc import Sequence

from . import Row, StoreUnavailable, Transaction, tables_refusal

__all__ = []

# The store's own failures, by SQLite's primary result code and the text SQLite gives it
# (Python before 3.11 gives no code): the file busy or locked past the wait, out of memory,
# read-only, interrupted, an I/O error, corrupt, full, not openable, not a database. Every
# other error (a syntax error, no such table or column, a constraint broken, a wrong
# binding) comes from the tool's own statement, and is the tool's.
STORE_FAILURES = {
    5: "database is locked",
    6: "database table is locked",
    7: "out of memory",
    8: "attempt to write a readonly database",
    9: "interrupted",
    10: "disk I/O error",
    11: "database disk image is malformed",
    13: "database or disk is full",
    14: "unable to open database file",
    15: "locking protocol",
    26: "file is not a database",
}

# A tool writes $1, $2... (PostgreSQL's placeholders) on every store; SQLite reads the
# same positions as ?1, ?2..., so one text serves both, and arguments bind by number.
# The rewrite does not parse SQL: a $ and digits inside a string literal are rewritten
# too, so such text is passed as an argument.
PLACEHOLDER = re.compile(r"\$(\d+)")


def sqlite_text(sql: str) -> str:
    """A tool's statement with SQLite's numbered placeholders for its $1, $2..."""
    return PLACEHOLDER.sub(r"?\1", sql)


def changed_rows(db: sqlite3.Connection, sql: str, args: Sequence[object]) -> int:
    """Run a tool's statement; how many rows an INSERT, UPDATE or DELETE changed (else 0), as PostgreSQL says."""
    cursor = db.execute(sqlite_text(sql), args)
    cursor.fetchall()  # an UPDATE ... RETURNING counts its rows as they are read
    return max(cursor.rowcount, 0)


def rows_of(db: sqlite3.Connection, sql: str, args: Sequence[object]) -> list[Row]:
    """Run a tool's query; its rows, as tuples."""
    return [tuple(row) for row in db.execute(sqlite_text(sql), args)]


def create_tables(db: sqlite3.Connection, tables: Sequence[str]) -> None:
    """The tools' own schema statements, in one write transaction (see open_store); run a second time and
    undone, so that one that would fail on the next start fails now."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for again in (False, True):
            db.execute("SAVEPOINT again")
            for number, statement in enumerate(tables, 1):
                try:
                    db.execute(sqlite_text(statement))
                except sqlite3.Error as error:
                    if store_failure(error) is not None:
                        raise
                    raise tables_refusal(number, error, again) from None
        db.execute("ROLLBACK TO SAVEPOINT again")  # the second run: only a rehearsal of the next start
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


def failed(error: Exception) -> StoreUnavailable:
    """A store failure, named for the log."""
    return StoreUnavailable(f"SQLite: {error}")


def store_failure(error: Exception) -> StoreUnavailable | None:
    """`error` as the store's failure, or None when it is the tool's own statement's (see STORE_FAILURES)."""
    if not isinstance(error, sqlite3.Error):
        return None
    code = getattr(error, "sqlite_errorcode", None)
    failing = code & 0xFF in STORE_FAILURES if code is not None else str(error) in STORE_FAILURES.values()
    return failed(error) if failing else None


class SQLiteStatements(Transaction):
    """A tool's statements on an SQLite connection, run by `send`: the SQLite store's and the memory store's."""

    async def execute(self, sql: str, *args: object) -> int:
        changed: int = await self.run(lambda db: changed_rows(db, sql, args))
        return changed

    async def fetchall(self, sql: str, *args: object) -> list[Row]:
        rows: list[Row] = await self.run(lambda db: rows_of(db, sql, args))
        return rows

    async def lock(self, name: str) -> None:
        await self.run(lambda db: None)  # the one write lock, taken by the first statement, covers every name

    def store_failure(self, error: Exception) -> StoreUnavailable | None:
        return store_failure(error)
