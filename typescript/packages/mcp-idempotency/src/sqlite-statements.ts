// The Python library's SQLite statements (stores/sqlite.py), as it spells them; a tool's statements on a connection,
// the tools' own tables made, and which errors are the store's own, as stores/sql.py has them: the SQLite store's, and
// the memory store's, whose tools' tables are a private SQLite database. test/sqlite.test.ts reads both Python files
// and holds the statements and the store's failures equal to them.

import type Database from "libsql";
import type { Row } from "./stores.js";

export type Db = Database.Database;

export const SCHEMA_VERSION = 4;
export const PRINCIPAL = "principal TEXT NOT NULL DEFAULT ''";
export const SHARE_INDEX = "CREATE INDEX idempotency_records_share ON idempotency_records (principal, deadline)";
// How many records each principal has, live or expired, and how many there are in all, kept in step by triggers on
// every insert and delete, so a claim checks the principal's share in one row.
export const SHARES = `
CREATE TABLE idempotency_shares (
    principal  TEXT PRIMARY KEY,
    records    INTEGER NOT NULL
)`;
export const INSERTED = `
CREATE TRIGGER idempotency_records_inserted AFTER INSERT ON idempotency_records BEGIN
    INSERT INTO idempotency_shares VALUES (NEW.principal, 1)
    ON CONFLICT (principal) DO UPDATE SET records = records + 1;
    UPDATE idempotency_record_count SET n = n + 1;
END`;
export const DELETED = `
CREATE TRIGGER idempotency_records_deleted AFTER DELETE ON idempotency_records BEGIN
    UPDATE idempotency_shares SET records = records - 1 WHERE principal = OLD.principal;
    DELETE FROM idempotency_shares WHERE principal = OLD.principal AND records = 0;
    UPDATE idempotency_record_count SET n = n - 1;
END`;
// The records and their counts: schema version 4 (PRAGMA user_version).
export const SCHEMA = `
CREATE TABLE idempotency_records (
    key          TEXT PRIMARY KEY,
    ${PRINCIPAL},
    fingerprint  BLOB NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'completed')),
    deadline     REAL NOT NULL,  -- running: when a retry may take over; completed: when it expires
    owner        TEXT,           -- running: the claim's token, so only it gives the key back
    outcome      TEXT,           -- completed: what is replayed
    CHECK ((status = 'completed') = (outcome IS NOT NULL))
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (deadline) WHERE status = 'completed';
${SHARE_INDEX};
-- How many records there are, so that no claim has to count the table (a count is a walk of every key).
CREATE TABLE idempotency_record_count (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    n   INTEGER NOT NULL
);
INSERT INTO idempotency_record_count VALUES (1, 0);
${SHARES};
${INSERTED};
${DELETED};
PRAGMA user_version = ${SCHEMA_VERSION};
`;
// The record that holds a key, read with no lock, and whether its deadline has passed.
export const HOLDER = "SELECT fingerprint, status, outcome, deadline <= :now FROM idempotency_records WHERE key = :key";
// The claim, under the write lock: a new key is inserted; an existing row is taken only where mayTake says so (its
// WHERE clause is that rule in SQL). It returns a row exactly when this call now holds the key.
export const CLAIM = `
INSERT INTO idempotency_records (key, principal, fingerprint, status, deadline, owner)
VALUES (:key, :principal, :fingerprint, 'running', :now + :lease, :owner)
ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, status = 'running', deadline = excluded.deadline,
                                owner = excluded.owner, outcome = NULL
WHERE idempotency_records.deadline <= :now
  AND (idempotency_records.status = 'completed' OR idempotency_records.fingerprint = excluded.fingerprint)
RETURNING owner
`;
export const COUNT = "SELECT n FROM idempotency_record_count";
export const RUNNING = "SELECT fingerprint FROM idempotency_records WHERE key = ? AND status = 'running'";
export const IS_NEW = "SELECT NOT EXISTS (SELECT 1 FROM idempotency_records WHERE key = ?)";
// How many records the principal has, live or expired: while that is within its share, so are its live ones.
export const SHARE_ROWS = "SELECT coalesce((SELECT records FROM idempotency_shares WHERE principal = ?), 0)";
// A principal whose records would exceed its share first loses its expired completed ones, a batch at a time.
export const PURGE_MINE = `
DELETE FROM idempotency_records WHERE key IN (
    SELECT key FROM idempotency_records WHERE principal = ? AND status = 'completed' AND deadline <= ?
    ORDER BY deadline LIMIT 1000)
`;
// Once this claim holds the key, does the principal hold more than its share of live records? A walk of the share
// index alone, which stops one past the share.
export const SHARE_EXCEEDED = `
SELECT count(*) > :share FROM (
    SELECT 1 FROM idempotency_records WHERE principal = :principal AND deadline > :now LIMIT :share + 1)
`;
// A purge runs only when the bound is reached, oldest first, a batch at a time.
export const PURGE = `
DELETE FROM idempotency_records WHERE key IN (
    SELECT key FROM idempotency_records WHERE status = 'completed' AND deadline <= ? ORDER BY deadline LIMIT 1000)
`;
// Only the claim's holder gives it back, or moves its lease on.
export const RELEASE = "DELETE FROM idempotency_records WHERE key = ? AND status = 'running' AND owner = ?";
export const RENEW = "UPDATE idempotency_records SET deadline = ? WHERE key = ? AND status = 'running' AND owner = ?";
// The first completion of a running key for this request wins; any other is fenced off.
export const COMPLETE = `
UPDATE idempotency_records SET status = 'completed', outcome = :outcome, deadline = :now + :retention, owner = NULL
WHERE key = :key AND status = 'running' AND fingerprint = :fingerprint
`;

// The store's own failures, by SQLite's primary result code, as sql.py's STORE_FAILURES: busy, locked, out of memory,
// read-only, interrupted, an I/O error, corrupt, full, not openable, locking protocol, not a database. Every other
// error (a syntax error, no such table, a constraint broken) comes from the tool's own statement, and is the tool's.
export const STORE_FAILURES = [5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 26];

/** SQLite's primary result code of a driver error; undefined for any other error (a bad argument, ours). */
export function codeOf(error: unknown): number | undefined {
  const raw = (error as { rawCode?: unknown } | null)?.rawCode;
  return typeof raw === "number" ? raw & 0xff : undefined;
}

/** Is `error` a failure of the store rather than of the tool's own statement? */
export function storeFailure(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && STORE_FAILURES.includes(code);
}

/** One row of a query, as an array. */
export function row(db: Db, sql: string, args: unknown): unknown[] | undefined {
  return db.prepare(sql).raw().get(args) as unknown[] | undefined;
}

// A tool writes $1, $2... (PostgreSQL's placeholders) on every store; SQLite reads the same positions as ?1, ?2...

/** A tool's statement with SQLite's numbered placeholders (?1, ?2...) for its $1, $2..., as sql.py rewrites it. */
export function sqliteText(sql: string): string {
  return sql.replace(/\$(\d+)/g, "?$1");
}

/** A tool's arguments as SQLite binds them: a boolean as 1 or 0, as Python's sqlite3 binds it (the driver
 * would abort the process on one). */
function bound(args: unknown[]): unknown[] {
  return args.map((arg) => (typeof arg === "boolean" ? Number(arg) : arg));
}

/** Run a tool's statement; how many rows an INSERT, UPDATE or DELETE changed (else 0), as PostgreSQL says. */
export function changedRows(db: Db, sql: string, args: unknown[]): number {
  const statement = db.prepare(sqliteText(sql));
  const before = row(db, "SELECT total_changes()", [])![0];
  if (statement.reader) statement.raw().all(bound(args)); // an UPDATE ... RETURNING counts its rows as they are read
  else statement.run(bound(args));
  return row(db, "SELECT total_changes()", [])![0] === before ? 0 : Number(row(db, "SELECT changes()", [])![0]);
}

/** Run a tool's query; its rows, as arrays. */
export function rowsOf(db: Db, sql: string, args: unknown[]): Row[] {
  const statement = db.prepare(sqliteText(sql));
  if (!statement.reader) {
    statement.run(bound(args));
    return [];
  }
  return statement.raw().all(bound(args)) as Row[];
}

/** A start the store refuses, in one line that names the fix. */
export class Misconfigured extends Error {}

/** A driver error's message, for one line. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The tools' own schema statements in one write transaction, run a second time and undone, so that one that would
 * fail on the next start fails now (as sql.py's create_tables). */
export function createTables(db: Db, tables: readonly string[]): void {
  db.exec("BEGIN IMMEDIATE");
  try {
    for (const again of [false, true]) {
      db.exec("SAVEPOINT again");
      tables.forEach((statement, index) => {
        try {
          db.exec(sqliteText(statement));
        } catch (error) {
          if (storeFailure(error)) throw error;
          const why = messageOf(error);
          throw new Misconfigured(again
            ? `the tools' table statement ${index + 1} would fail on the next start (${why}): let it allow for what `
              + "it made before (CREATE TABLE IF NOT EXISTS, INSERT ... WHERE NOT EXISTS)"
            : `the tools' table statement ${index + 1} failed (${why}): correct it`);
        }
      });
    }
    db.exec("ROLLBACK TO SAVEPOINT again"); // the second run: only a rehearsal of the next start
    db.exec("COMMIT");
  } finally {
    if (db.inTransaction) db.exec("ROLLBACK");
  }
}
