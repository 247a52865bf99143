// The SQLite store: one file, shared by several processes on one machine, whose clock is the machine's. It is the
// Python library's SQLite store (stores/sqlite.py) in another language: the same tables, the same claim in one
// write transaction, the same lease, fencing and renewals, the same PATH.lock and WAL, so a Python instance and a
// TypeScript one on one file deduplicate each other's retries. Its statements are sqlite.py's, copied as they are
// into sqlite-statements.ts (test/sqlite.test.ts reads sqlite.py and holds them equal).
//
// The driver (libsql) is synchronous: a statement that waited inside SQLite for another process's lock would stall
// the event loop for as long. So no connection waits inside SQLite: a write begins with BEGIN IMMEDIATE, tried again
// after short pauses on timers until the store's wait has passed. Once it holds the file, no statement of a WAL file
// waits for a lock. A read never waits for a writer in WAL mode.

import { spawn } from "node:child_process";
import { closeSync, existsSync, openSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import Database from "libsql";
import { CLAIM, COMPLETE, COUNT, type Db, HOLDER, IS_NEW, Misconfigured, PURGE, PURGE_MINE, RELEASE, RENEW, RUNNING,
  SCHEMA, SCHEMA_VERSION, SHARE_EXCEEDED, SHARE_ROWS, codeOf, createTables, messageOf, row }
  from "./sqlite-statements.js";
import { type Claim, type Completion, type Limits, type Store, StoreUnavailable,
  type Transaction, mayTake, newOwner } from "./stores.js";
import { SQLiteConnectionTransaction } from "./sqlite-transaction.js";
import { LONGEST_WAIT, Turn, waitOf } from "./turn.js";

const BUSY = [5, 6];

const OTHERWISE = "move the file aside or point --store elsewhere";
const WRITER_TAKEN = "SQLite: the file's one writer stayed taken past the store's wait, by another unit of work; "
  + "a tool should do slow work before its unit of work's first statement";
const ROLLED_BACK = "SQLite: it rolled this unit of work back itself (a full disk, an I/O error)";
const WHOLE = "unit_of_work"; // the savepoint every unit of work begins with, so a fenced one keeps its renewals

/** A store failure, named for the log. */
function failed(error: unknown): StoreUnavailable {
  return error instanceof StoreUnavailable ? error : new StoreUnavailable(`SQLite: ${messageOf(error)}`);
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** BEGIN IMMEDIATE on `db`, tried again after short pauses until `seconds` have passed, then `work` in the same
 * turn of the event loop, so that nothing else of this process uses `db` between the two. */
async function immediately<T>(db: Db, seconds: number, work: () => T): Promise<T> {
  const until = Date.now() + seconds * 1000;
  for (let pause = 1; ; pause = Math.min(2 * pause, 20)) {
    try {
      db.exec("BEGIN IMMEDIATE");
      break;
    } catch (error) {
      if (!BUSY.includes(codeOf(error) ?? 0) || Date.now() >= until) throw error;
    }
    await sleep(pause);
  }
  return work();
}

/** A connection that may wait as it is set up (another process opening or closing the file holds it a moment), then
 * never inside SQLite (`immediately` waits instead). */
function connect(path: string, synchronous: "FULL" | "NORMAL"): Db {
  const db = new Database(path);
  db.exec(`PRAGMA busy_timeout = ${LONGEST_WAIT * 1000}`);
  db.exec(`PRAGMA synchronous = ${synchronous}`);
  db.exec("PRAGMA busy_timeout = 0");
  return db;
}

// ---- opening the file ----

/** Run `work` while this process alone may create or upgrade the file's tables: an exclusive flock on PATH.lock, the
 * Python store's own turn (switching a new file to WAL fails when several processes try at once, and two of them
 * both finding no tables would both make them). flock(1) holds it for us: Node has no flock of its own. Where there
 * is no flock(1), the write lock alone keeps TypeScript instances apart (the version is read under it). */
async function schemaTurn<T>(path: string, work: () => T): Promise<T> {
  const lock = `${path}.lock`;
  closeSync(openSync(lock, "w"));
  const holder = spawn("flock", ["--exclusive", lock, "sh", "-c", "echo held; exec cat >/dev/null"],
    { stdio: ["pipe", "pipe", "ignore"] });
  const held = await new Promise<boolean>((done, refused) => {
    holder.stdout.once("data", () => done(true));
    holder.once("error", (error: NodeJS.ErrnoException) => (error.code === "ENOENT" ? done(false) : refused(error)));
    holder.once("exit", (status) => refused(new Error(`flock ${lock} exited with status ${status}`)));
  });
  try {
    return work();
  } finally {
    if (held) {
      const gone = new Promise((done) => holder.once("close", done));
      holder.stdin.end();
      await gone;
    }
  }
}

/** The schema version the file holds: 0 for no tables at all, 1 for the layout before the version was recorded. */
function foundVersion(db: Db): number {
  const version = Number(row(db, "PRAGMA user_version", [])![0]);
  const tables = Number(row(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'idempotency_records'", [])![0]);
  return version || Math.min(tables, 1);
}

/** Create the file and its tables once, however many processes start at once, then the tools' own; refuse, in one
 * line, a missing folder, or a file that holds another version's tables or none can hold. */
async function createSchema(path: string, tables: readonly string[]): Promise<void> {
  const folder = dirname(resolve(path));
  if (!existsSync(folder) || !statSync(folder).isDirectory()) {
    throw new Misconfigured(`there is no folder ${folder} for the SQLite file: create it, or point the store elsewhere`);
  }
  try {
    await schemaTurn(path, () => {
      const db = connect(path, "FULL");
      try {
        db.exec(`PRAGMA busy_timeout = ${LONGEST_WAIT * 1000}`);
        row(db, "PRAGMA journal_mode = WAL", []);
        db.exec("BEGIN IMMEDIATE");
        const found = foundVersion(db);
        if (found !== 0 && found !== SCHEMA_VERSION) {
          const remedy = found === 2 || found === 3
            ? `upgrade it in place with: mcp-idempotency-store upgrade sqlite:${path}` : OTHERWISE;
          throw new Misconfigured(`it holds schema version ${found}, and this code reads version ${SCHEMA_VERSION}; ${remedy}`);
        }
        if (found === 0) db.exec(SCHEMA);
        db.exec("COMMIT");
        createTables(db, tables);
      } finally {
        if (db.inTransaction) db.exec("ROLLBACK");
        db.close();
      }
    });
  } catch (error) {
    if (error instanceof Misconfigured) throw error;
    throw new Misconfigured(`the SQLite file ${path} cannot be opened (${messageOf(error)}): ${OTHERWISE}`);
  }
}

export class SQLiteStore implements Store {
  // One writer per process, one unit of work at a time on it: SQLite lets one writer in at a time anyway.
  readonly turn = new Turn();
  holding: SQLiteTransaction | null = null; // the unit of work holding the writer, once begun
  asideWaiting = 0; // the store's own writes waiting for the file: a unit of work lets them go first

  /** `short`: the claims, renewals and releases, each one short write transaction, synchronous=NORMAL: none is an
   * outcome anyone was told, and a completion's commit syncs the whole log, their frames before it included. It never
   * checkpoints, so a claim never pays for one. `writer`: the units of work, synchronous=FULL, so a completion the
   * client was told about survives power loss. */
  constructor(readonly url: string, readonly limits: Limits, readonly short: Db, readonly writer: Db,
    readonly clock: () => number) {}

  /** Open the file `path` names, making it and its tables once, then the tools' own `tables`. */
  static async open(path: string, limits: Limits, tables: readonly string[] = [],
    clock: () => number = () => Date.now() / 1000): Promise<SQLiteStore> {
    await createSchema(path, tables);
    const short = connect(path, "NORMAL");
    short.exec("PRAGMA wal_autocheckpoint = 0");
    return new SQLiteStore(`sqlite:${path}`, limits, short, connect(path, "FULL"), clock);
  }

  async claim(key: string, fingerprint: Uint8Array, principal: string): Promise<Claim> {
    try {
      try {
        return await this.claimWaiting(0, key, fingerprint, principal);
      } catch (error) {
        if (!BUSY.includes(codeOf(error) ?? 0)) throw error;
        // Another writer has the file. A takeover waits for no writer: the holder's own renewal may be waiting
        // behind it too, so a running key is answered in progress.
        const running = row(this.short, RUNNING, [key]);
        if (running !== undefined) return { kind: "held", fingerprint: new Uint8Array(running[0] as Buffer), outcome: null };
        return await this.claimWaiting(waitOf(this.limits), key, fingerprint, principal);
      }
    } catch (error) {
      throw failed(error);
    }
  }

  /** A read; then, if the key may be taken, one write transaction, waiting `seconds` at most for the file. */
  async claimWaiting(seconds: number, key: string, fingerprint: Uint8Array, principal: string): Promise<Claim> {
    const holder = row(this.short, HOLDER, { key, now: this.clock() });
    if (holder !== undefined && !mayTake(holder[1] as "running" | "completed", holder[0] as Buffer, holder[3] === 1, fingerprint)) {
      return { kind: "held", fingerprint: new Uint8Array(holder[0] as Buffer), outcome: holder[2] as string | null };
    }
    return this.aside(seconds, () => this.take(key, fingerprint, principal, this.clock()));
  }

  /** Under the write lock, the key claimed, or the record that holds it now. */
  take(key: string, fingerprint: Uint8Array, principal: string, now: number): Claim {
    const db = this.short;
    const isNew = Number(row(db, IS_NEW, [key])![0]);
    const count = () => Number(row(db, COUNT, [])![0]);
    if (isNew && count() >= this.limits.maxRecords) {
      db.prepare(PURGE).run([now]); // only a full store purges
      if (count() >= this.limits.maxRecords) {
        db.exec("COMMIT"); // keep the purge
        return { kind: "full" };
      }
    }
    const share = this.limits.maxRecordsPerPrincipal;
    // Within its share counting every record of its own, live or not, the principal has room: no walk.
    const near = Number(row(db, SHARE_ROWS, [principal])![0]) + isNew > share;
    if (near) {
      db.prepare(PURGE_MINE).run([principal, now]);
      db.exec("SAVEPOINT claim"); // a refusal undoes the claim, and keeps the purges
    }
    const owner = newOwner();
    const claim = { key, principal, fingerprint: Buffer.from(fingerprint), owner, now, lease: this.limits.lease };
    if (row(db, CLAIM, claim) === undefined) { // another process claimed or completed it between the read and BEGIN
      const holder = row(db, HOLDER, { key, now })!;
      db.exec("COMMIT");
      return { kind: "held", fingerprint: new Uint8Array(holder[0] as Buffer), outcome: holder[2] as string | null };
    }
    if (near && row(db, SHARE_EXCEEDED, { principal, now, share })![0]) {
      // After the claim, so a key another process took meanwhile is answered held, never full.
      db.exec("ROLLBACK TO SAVEPOINT claim");
      db.exec("COMMIT");
      return { kind: "full" };
    }
    db.exec("COMMIT");
    return { kind: "won", owner };
  }

  /** One of the store's own short writes, on `short`, waiting `seconds` at most for the file; `work` ends it. */
  async aside<T>(seconds: number, work: () => T): Promise<T> {
    let waiting = true;
    const arrived = () => {
      if (waiting) this.asideWaiting -= 1;
      waiting = false;
    };
    this.asideWaiting += 1;
    try {
      return await immediately(this.short, seconds, () => {
        arrived();
        try {
          return work();
        } finally {
          if (this.short.inTransaction) this.short.exec("ROLLBACK"); // `work` failed part way
        }
      });
    } finally {
      arrived();
    }
  }

  async renew(key: string, owner: string): Promise<boolean> {
    if (this.holding !== null) {
      // A unit of work of this process holds the file's one write lock, so no other process can take the key over
      // until it lets go; it renews the lease just before it does, so the renewal never waits on it.
      this.holding.renewals.set(`${key}\n${owner}`, [key, owner]);
      return true;
    }
    try {
      return await this.aside(waitOf(this.limits), () => {
        const renewed = this.short.prepare(RENEW).run([this.clock() + this.limits.lease, key, owner]).changes === 1;
        this.short.exec("COMMIT");
        return renewed;
      });
    } catch (error) {
      throw failed(error);
    }
  }

  async release(key: string, owner: string): Promise<void> {
    try {
      await this.aside(waitOf(this.limits), () => {
        this.short.prepare(RELEASE).run([key, owner]);
        this.short.exec("COMMIT");
      });
    } catch (error) {
      throw failed(error);
    }
  }

  begin(): Transaction {
    return new SQLiteTransaction(this);
  }

  async close(): Promise<void> {
    this.short.close();
    this.writer.close();
  }
}

/** BEGIN IMMEDIATE at the first statement, on this process's one writer connection, held to the end. While it holds
 * the file no other process writes, so none takes a claim over: the renewals asked for meanwhile (of any claim of
 * this process) are made just before it lets go. */
class SQLiteTransaction extends SQLiteConnectionTransaction {
  readonly renewals = new Map<string, [string, string]>(); // (key, owner) of each claim to renew before the end

  constructor(readonly store: SQLiteStore) {
    super("SQLite", ROLLED_BACK);
  }

  protected get db(): Db {
    return this.store.writer;
  }

  /** Take this process's writer, let the store's own waiting writes go first, then hold the file; a unit of work
   * ended while it waited (rolled back past its deadline) takes nothing, so the writer is never left held. */
  async begin(): Promise<void> {
    const { store } = this;
    const seconds = waitOf(store.limits);
    await store.turn.take(seconds, WRITER_TAKEN);
    try {
      const until = Date.now() + seconds * 1000;
      while (store.asideWaiting > 0 && Date.now() < until) await sleep(1);
      await immediately(store.writer, seconds, () => {
        if (this.ended) throw this.hasEnded();
        store.writer.exec(`SAVEPOINT ${WHOLE}`);
        this.begun = true;
        store.holding = this;
      });
    } catch (error) {
      if (store.writer.inTransaction) store.writer.exec("ROLLBACK");
      store.turn.release(); // BEGIN failed: let the next unit of work of this process in
      throw error;
    }
  }

  /** The completion kept, or fenced off with every statement; the renewals; COMMIT. False when fenced off. */
  protected async finish(completion: Completion | null): Promise<boolean> {
    try {
      if (!this.begun) await this.run(() => undefined); // a completion with no statement before it: BEGIN for it
      const db = this.store.writer;
      if (!db.inTransaction) throw new StoreUnavailable(ROLLED_BACK);
      let applied = true;
      if (completion !== null) {
        const { clock, limits } = this.store;
        const completing = { key: completion.key, fingerprint: Buffer.from(completion.fingerprint),
          outcome: completion.outcome, now: clock(), retention: limits.retention };
        applied = db.prepare(COMPLETE).run(completing).changes === 1;
        // The key no longer runs for this request: nothing of this unit of work is kept.
        if (!applied) db.exec(`ROLLBACK TO SAVEPOINT ${WHOLE}`);
      }
      this.renewedIn(db);
      db.exec("COMMIT");
      return applied;
    } catch (error) {
      throw failed(error);
    } finally {
      this.letGo();
    }
  }

  /** Every statement undone, the renewals kept, if SQLite has not rolled back already. */
  protected async abandon(): Promise<void> {
    try {
      const db = this.store.writer;
      if (db.inTransaction) {
        db.exec(`ROLLBACK TO SAVEPOINT ${WHOLE}`);
        this.renewedIn(db);
        db.exec("COMMIT");
      }
    } catch (error) {
      throw failed(error);
    } finally {
      this.letGo();
    }
  }

  /** The leases renewed while this unit of work held the file, moved on now, before it lets go. */
  renewedIn(db: Db): void {
    const deadline = this.store.clock() + this.store.limits.lease;
    const renew = db.prepare(RENEW);
    for (const [key, owner] of this.renewals.values()) renew.run([deadline, key, owner]);
  }

  /** Whatever happened, the transaction is over and the writer free. */
  protected letGo(): void {
    this.ended = true;
    if (!this.begun) return;
    this.begun = false;
    try {
      if (this.store.writer.inTransaction) this.store.writer.exec("ROLLBACK"); // the ending failed part way
    } finally {
      this.store.holding = null;
      this.store.turn.release();
    }
  }
}
