// The PostgreSQL store: the Python library's tables and claim function (sql/, byte for byte its
// stores/postgres_v4*.sql), so a Python instance and a TypeScript one on one database
// deduplicate each other's retries. Every time is the database's clock; every wait is bounded.

import { readFileSync } from "node:fs";
import pg from "pg";
import { BaseTransaction, type Claim, type Completion, type Limits, type Row, type Store, StoreUnavailable,
  type Transaction, newOwner } from "./stores.js";

const SCHEMA_VERSION = 4;
const sql = (name: string) => readFileSync(new URL(`../sql/${name}`, import.meta.url), "utf8");
const SCHEMA = sql(`postgres_v${SCHEMA_VERSION}.sql`) + sql(`postgres_v${SCHEMA_VERSION}_claim.sql`);

const TABLES_FOUND = "SELECT to_regclass('idempotency_schema') IS NOT NULL AS versioned, to_regclass('idempotency_records') IS NOT NULL AS records";
const CLAIM = "SELECT status, fingerprint, outcome FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7)";
const HOLDER = "SELECT fingerprint, outcome FROM idempotency_records WHERE key = $1";
const RELEASE = "DELETE FROM idempotency_records WHERE key = $1 AND status = 'running' AND owner = $2";
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
class PostgresTransaction extends BaseTransaction<pg.PoolClient> {
  db: pg.PoolClient | null = null;

  constructor(readonly store: PostgresStore) {
    super("PostgreSQL");
  }

  /** A connection is held from the first statement (its BEGIN included) until the end gives it back. */
  get begun(): boolean {
    return this.db !== null;
  }

  /** Every error is the store's but the tool's own statement's (a constraint, a bad value). */
  protected failureOf(error: unknown): StoreUnavailable | null {
    return toolsOwn(error) ? null : failed(error);
  }

  /** BEGIN and the pending savepoints in one trip with the first statement's connection; later savepoints in one. */
  protected async send<T>(statement: (db: pg.PoolClient) => T | Promise<T>): Promise<T> {
    if (this.db === null) {
      const db = await this.store.pool.connect();
      if (this.ended) { // ended while it waited for a connection (rolled back past its deadline): give it back
        db.release();
        throw this.hasEnded();
      }
      this.db = db;
      await this.db.query(["BEGIN ISOLATION LEVEL READ COMMITTED", ...this.savepointsToSend()].join("; "));
    } else if (this.unsent > 0) {
      await this.db.query(this.savepointsToSend().join("; "));
    }
    return statement(this.db);
  }

  /** The SAVEPOINT statements asked for since the last statement, now counted as begun. */
  savepointsToSend(): string[] {
    return this.pending().map((name) => `SAVEPOINT ${name}`);
  }

  /** One statement of this unit of work, its columns by position: names may repeat. */
  async query(text: string, values: unknown[]): Promise<pg.QueryResult<Row>> {
    return this.run((db) => db.query<Row>({ text, values, rowMode: "array" }));
  }

  async execute(text: string, ...args: unknown[]): Promise<number> {
    return (await this.query(text, args)).rowCount ?? 0;
  }

  async fetchall(text: string, ...args: unknown[]): Promise<Row[]> {
    return (await this.query(text, args)).rows;
  }

  protected async finish(completion: Completion | null): Promise<boolean> {
    try {
      if (completion !== null) {
        const { key, fingerprint, outcome } = completion;
        const completed = await this.query(COMPLETE, [key, Buffer.from(fingerprint), outcome, this.store.limits.retention]);
        if (completed.rowCount !== 1) {
          await this.end("ROLLBACK");
          return false;
        }
      }
      await this.end("COMMIT");
      return true;
    } catch (error) {
      await this.letGo();
      throw error;
    }
  }

  protected async abandon(): Promise<void> {
    await this.end("ROLLBACK");
  }

  /** ROLLBACK, its own failure not said: the failure that brought it here is. */
  protected async letGo(): Promise<void> {
    await this.end("ROLLBACK").catch(() => {});
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
