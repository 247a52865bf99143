// The PostgreSQL store: the Python library's tables and claim function (sql/, byte for byte its
// stores/postgres_v3*.sql), so a Python instance and a TypeScript one on one database
// deduplicate each other's retries. Every time is the database's clock; every wait is bounded.

import { readFileSync } from "node:fs";
import pg from "pg";
import { type Claim, type Limits, type Row, type Store, StoreUnavailable, type Transaction, newOwner } from "./stores.js";

const SCHEMA_VERSION = 3;
const sql = (name: string) => readFileSync(new URL(`../sql/${name}`, import.meta.url), "utf8");
const SCHEMA = sql(`postgres_v${SCHEMA_VERSION}.sql`) + sql(`postgres_v${SCHEMA_VERSION}_claim.sql`);

const TABLES_FOUND = "SELECT to_regclass('idempotency_schema') IS NOT NULL AS versioned, to_regclass('idempotency_records') IS NOT NULL AS records";
const CLAIM = "SELECT status, fingerprint, outcome FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7)";
const HOLDER = "SELECT fingerprint, outcome FROM idempotency_records WHERE key = $1";
const RELEASE = `WITH released AS (DELETE FROM idempotency_records WHERE key = $1 AND status = 'running' AND owner = $2 RETURNING 1)
UPDATE idempotency_record_count SET n = n - (SELECT count(*) FROM released)`;
const RENEW = `UPDATE idempotency_records SET deadline = clock_timestamp() + make_interval(secs => $3)
WHERE key = $1 AND status = 'running' AND owner = $2`;
const COMPLETE = `UPDATE idempotency_records
SET status = 'completed', outcome = $3, deadline = clock_timestamp() + make_interval(secs => $4), owner = NULL
WHERE key = $1 AND status = 'running' AND fingerprint = $2`;
const LOCK_NOT_AVAILABLE = "55P03";
/** The tool's own statements' errors (a constraint, a bad value) are its outcome, not the store failing. */
const TOOLS_OWN = /^(22|23)/;

/** How long a statement may wait for a lock before the store gives up, as the Python library's Limits.wait. */
function wait(limits: Limits): number {
  return Math.min(10, limits.lease / 3);
}

/** A store failure, named for the log. */
function failed(error: unknown): StoreUnavailable {
  return new StoreUnavailable(`PostgreSQL: ${error instanceof Error ? error.message : String(error)}`);
}

/** Was this error the tool's own statement's, which the tool sees as it would unkeyed? */
function toolsOwn(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && TOOLS_OWN.test(code);
}

export class PostgresStore implements Store {
  constructor(readonly pool: pg.Pool, readonly limits: Limits) {}

  /** Open the database `url` names, creating the tables once however many instances start together,
   * then the tools' own `tables`; a database of another schema version is refused in one line. */
  static async open(url: string, limits: Limits, tables: readonly string[] = []): Promise<PostgresStore> {
    const pool = new pg.Pool({
      connectionString: url, max: 10, connectionTimeoutMillis: wait(limits) * 1000,
      lock_timeout: wait(limits) * 1000, statement_timeout: limits.lease * 1000,
      idle_in_transaction_session_timeout: (limits.lease + wait(limits)) * 1000,
      options: "-c default_transaction_isolation=read\\ committed",
    });
    pool.on("error", () => {}); // an idle connection lost: the next use fails, and says so
    try {
      const db = await pool.connect();
      try {
        await db.query("BEGIN");
        await db.query("SELECT pg_advisory_xact_lock(3182)");
        const found = await PostgresStore.version(db);
        if (found !== 0 && found !== SCHEMA_VERSION) {
          throw new Error(`${url}: it holds schema version ${found}, and this code reads version ${SCHEMA_VERSION}; `
            + "use an empty database, or upgrade it with the Python library: mcp-idempotency-store upgrade URL");
        }
        if (found === 0) await db.query(SCHEMA);
        for (const statement of tables) await db.query(statement);
        await db.query("COMMIT");
      } finally {
        db.release();
      }
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresStore(pool, limits);
  }

  /** The schema version the database holds: 0 for none, 1 for the layout before versions were kept. */
  static async version(db: pg.PoolClient): Promise<number> {
    const { versioned, records } = (await db.query(TABLES_FOUND)).rows[0] as { versioned: boolean; records: boolean };
    if (!versioned) return records ? 1 : 0;
    return Number((await db.query("SELECT max(version) AS v FROM idempotency_schema")).rows[0].v);
  }

  /** One statement on a pooled connection; any failure is the store's. */
  async query(text: string, values: unknown[]): Promise<pg.QueryResult> {
    try {
      return await this.pool.query(text, values);
    } catch (error) {
      throw failed(error);
    }
  }

  async claim(key: string, fingerprint: Uint8Array, principal: string): Promise<Claim> {
    const owner = newOwner();
    const bounds = [this.limits.lease, this.limits.maxRecords, this.limits.maxRecordsPerPrincipal];
    let row: { status: string; fingerprint: Buffer; outcome: string | null };
    try {
      row = (await this.pool.query(CLAIM, [key, principal, Buffer.from(fingerprint), owner, ...bounds])).rows[0];
    } catch (error) {
      if ((error as { code?: unknown }).code !== LOCK_NOT_AVAILABLE) throw failed(error);
      // One completing the key holds its row: it is in progress; given back meanwhile, the client retries.
      const holder = (await this.query(HOLDER, [key])).rows[0] as { fingerprint: Buffer; outcome: string | null } | undefined;
      if (holder === undefined) throw failed(error);
      return { kind: "held", fingerprint: new Uint8Array(holder.fingerprint), outcome: holder.outcome };
    }
    if (row.status === "won") return { kind: "won", owner };
    if (row.status === "full") return { kind: "full" };
    return { kind: "held", fingerprint: new Uint8Array(row.fingerprint), outcome: row.outcome };
  }

  async renew(key: string, owner: string): Promise<boolean> {
    return (await this.query(RENEW, [key, owner, this.limits.lease])).rowCount === 1;
  }

  async release(key: string, owner: string): Promise<void> {
    await this.query(RELEASE, [key, owner]);
  }

  begin(): Transaction {
    return new PostgresTransaction(this);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/** A pooled connection and BEGIN at the first statement: every statement inside it, or none. */
class PostgresTransaction implements Transaction {
  db: pg.PoolClient | null = null;
  savepoints: string[] = [];
  unsent = 0; // how many of the innermost savepoints have not yet begun
  count = 0;
  failure: unknown = null;
  completion: [string, Uint8Array, string] | null = null;
  ended = false; // committed or rolled back: a statement still coming (a run past its deadline) opens nothing

  constructor(readonly store: PostgresStore) {}

  /** Run `text` in this unit of work, after BEGIN and any savepoint not yet sent. */
  async run(text: string, values: unknown[]): Promise<pg.QueryResult<Row>> {
    if (this.failure !== null) throw failed(this.failure);
    if (this.ended) throw new StoreUnavailable("PostgreSQL: this unit of work has ended");
    try {
      if (this.db === null) {
        this.db = await this.store.pool.connect();
        await this.db.query(["BEGIN ISOLATION LEVEL READ COMMITTED", ...this.pending()].join("; "));
      } else if (this.unsent > 0) {
        await this.db.query(this.pending().join("; "));
      }
      return await this.db.query<Row>({ text, values, rowMode: "array" }); // columns by position: names may repeat
    } catch (error) {
      if (toolsOwn(error)) throw error;
      this.failure = error;
      throw failed(error);
    }
  }

  /** The SAVEPOINT statements asked for since the last statement, now counted as begun. */
  pending(): string[] {
    const names = this.savepoints.slice(this.savepoints.length - this.unsent);
    this.unsent = 0;
    return names.map((name) => `SAVEPOINT ${name}`);
  }

  async execute(text: string, ...args: unknown[]): Promise<number> {
    return (await this.run(text, args)).rowCount ?? 0;
  }

  async fetchall(text: string, ...args: unknown[]): Promise<Row[]> {
    return (await this.run(text, args)).rows;
  }

  savepoint(): string {
    this.count += 1;
    const name = `nested_${this.count}`;
    this.savepoints.push(name);
    this.unsent += 1;
    return name;
  }

  async endSavepoint(name: string, failedInside: boolean): Promise<void> {
    this.savepoints.splice(this.savepoints.indexOf(name), 1);
    if (this.unsent > 0) this.unsent -= 1; // never begun: nothing to undo
    else if (failedInside && this.failure === null) await this.run(`ROLLBACK TO SAVEPOINT ${name}`, []);
  }

  complete(key: string, fingerprint: Uint8Array, outcome: string): void {
    this.completion = [key, fingerprint, outcome];
  }

  async commit(): Promise<boolean> {
    try {
      if (this.failure !== null) throw failed(this.failure); // a unit of work that failed part way commits nothing
      if (this.completion !== null) {
        const [key, fingerprint, outcome] = this.completion;
        const completed = await this.run(COMPLETE, [key, Buffer.from(fingerprint), outcome, this.store.limits.retention]);
        if (completed.rowCount !== 1) {
          await this.end("ROLLBACK");
          return false;
        }
      }
      await this.end("COMMIT");
      return true;
    } catch (error) {
      await this.end("ROLLBACK").catch(() => {});
      throw error;
    }
  }

  async rollback(): Promise<void> {
    await this.end("ROLLBACK");
  }

  /** COMMIT or ROLLBACK, if this unit of work began; the connection goes back to the pool. */
  async end(statement: string): Promise<void> {
    this.ended = true;
    const db = this.db;
    if (db === null) return;
    this.db = null;
    try {
      await db.query(statement);
      db.release();
    } catch (error) {
      db.release(error instanceof Error ? error : true); // a broken connection is not pooled again
      throw failed(error);
    }
  }
}
