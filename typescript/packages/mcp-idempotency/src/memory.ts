// The memory store: this process's records; a retry that lands on another instance, or after a restart, finds
// nothing. The tools' own tables live in a private in-process SQLite database, as the Python library's memory store
// keeps them, so a tool's statements run unchanged here, on SQLite and on PostgreSQL: its writes commit with the
// record's completion in one unit of work, or roll back with it.

import Database from "libsql";
import { type Db, createTables, messageOf } from "./sqlite-statements.js";
import { type Claim, type Completion, type Limits, type Store, StoreUnavailable,
  type Transaction, mayTake, newOwner, same } from "./stores.js";
import { SQLiteConnectionTransaction } from "./sqlite-transaction.js";
import { Turn, waitOf } from "./turn.js";

// Said when a unit of work waits past the store's wait for another to let go of the tools' tables.
const WRITER_TAKEN = "memory: another unit of work holds the tools' tables past the store's wait; "
  + "a tool should do slow work before its unit of work's first statement";
const ROLLED_BACK = "memory: SQLite rolled this unit of work back itself";

/** A store failure, named for the log. */
function failed(error: unknown): StoreUnavailable {
  return error instanceof StoreUnavailable ? error : new StoreUnavailable(`memory: ${messageOf(error)}`);
}

interface MemoryRecord {
  principal: string;
  fingerprint: Uint8Array;
  status: "running" | "completed";
  deadline: number; // milliseconds since the epoch
  owner: string | null;
  outcome: string | null;
}

export class MemoryStore implements Store {
  readonly records = new Map<string, MemoryRecord>();
  readonly keysOf = new Map<string, Set<string>>(); // principal -> its keys, as the SQL stores' index on principal

  // The tools' tables: one unit of work at a time holds them, from its first statement to its end, as on SQLite. The
  // driver is synchronous and there is no disk to wait for, so a statement never stalls the event loop for long.
  readonly data: Db;
  readonly turn = new Turn();

  /** `tables`: the tools' own schema statements, run now on the private database. */
  constructor(readonly limits: Limits, readonly now: () => number = Date.now, tables: readonly string[] = []) {
    this.data = new Database(":memory:");
    try {
      createTables(this.data, tables);
    } catch (error) {
      this.data.close();
      throw error;
    }
  }

  claim(key: string, fingerprint: Uint8Array, principal: string): Claim {
    const now = this.now();
    const held = this.records.get(key);
    if (held !== undefined && !mayTake(held.status, held.fingerprint, held.deadline <= now, fingerprint)) {
      return { kind: "held", fingerprint: held.fingerprint, outcome: held.outcome };
    }
    if (this.shareTaken(principal, now)) return { kind: "full" };
    if (held === undefined && this.records.size >= this.limits.maxRecords) {
      this.purge(now);
      if (this.records.size >= this.limits.maxRecords) return { kind: "full" };
    }
    const owner = newOwner();
    if (held !== undefined) this.drop(key);
    this.records.set(key, { principal, fingerprint, status: "running", deadline: now + this.limits.lease * 1000, owner, outcome: null });
    this.keysOf.set(principal, (this.keysOf.get(principal) ?? new Set()).add(key));
    return { kind: "won", owner };
  }

  /** Does `principal` hold its share of records whose deadline is ahead? Fewer records than the share: no walk. */
  shareTaken(principal: string, now: number): boolean {
    const keys = this.keysOf.get(principal);
    if (keys === undefined || keys.size < this.limits.maxRecordsPerPrincipal) return false;
    let live = 0;
    for (const key of keys) if (this.records.get(key)!.deadline > now) live += 1;
    return live >= this.limits.maxRecordsPerPrincipal;
  }

  /** Only a full store purges: the completed records whose window has passed. */
  purge(now: number): void {
    for (const [key, record] of this.records) {
      if (record.status === "completed" && record.deadline <= now) this.drop(key);
    }
  }

  /** Delete one record, and its place in its principal's keys. */
  drop(key: string): void {
    const record = this.records.get(key);
    if (record === undefined) return;
    this.records.delete(key);
    this.keysOf.get(record.principal)?.delete(key);
  }

  /** The record `owner` holds running under `key`, if it still does. */
  holding(key: string, owner: string): MemoryRecord | undefined {
    const record = this.records.get(key);
    return record?.status === "running" && record.owner === owner ? record : undefined;
  }

  async renew(key: string, owner: string): Promise<boolean> {
    const record = this.holding(key, owner);
    if (record !== undefined) record.deadline = this.now() + this.limits.lease * 1000;
    return record !== undefined;
  }

  async release(key: string, owner: string): Promise<void> {
    if (this.holding(key, owner) !== undefined) this.drop(key);
  }

  /** The record still running `key` for this request, which a completion may complete; else it is fenced off. */
  completable(key: string, fingerprint: Uint8Array): MemoryRecord | undefined {
    const record = this.records.get(key);
    return record?.status === "running" && same(record.fingerprint, fingerprint) ? record : undefined;
  }

  begin(): Transaction {
    return new MemoryTransaction(this);
  }

  async close(): Promise<void> {
    this.data.close();
  }
}

/** The tool's statements, in a transaction of the private database begun at the first of them and held to the end.
 * The record's completion is checked as it commits, in the same turn of the event loop, so nothing completes the
 * key in between: a fenced completion rolls back every statement with it. */
class MemoryTransaction extends SQLiteConnectionTransaction {
  constructor(readonly store: MemoryStore) {
    super("memory", ROLLED_BACK);
  }

  protected get db(): Db {
    return this.store.data;
  }

  /** Wait for the store's turn, then BEGIN; a unit of work ended while it waited takes nothing. */
  async begin(): Promise<void> {
    const { store } = this;
    await store.turn.take(waitOf(store.limits), WRITER_TAKEN);
    try {
      if (this.ended) throw this.hasEnded();
      store.data.exec("BEGIN");
    } catch (error) {
      store.turn.release();
      throw error;
    }
    this.begun = true;
  }

  /** The completion kept with every statement, or fenced off with them all. False when fenced off. No `await` from
   * the record's check to its completion: on one event loop, nothing else completes or takes the key meanwhile. */
  protected finish(completion: Completion | null): boolean {
    try {
      const db = this.store.data;
      if (this.begun && !db.inTransaction) throw new StoreUnavailable(ROLLED_BACK);
      const record = completion === null ? undefined : this.store.completable(completion.key, completion.fingerprint);
      if (completion !== null && record === undefined) {
        if (this.begun) db.exec("ROLLBACK"); // the key no longer runs for this request: nothing of this unit is kept
        return false;
      }
      if (this.begun) db.exec("COMMIT"); // before the record changes: a failed COMMIT leaves the key running
      if (record !== undefined) {
        const { now, limits } = this.store;
        Object.assign(record, { status: "completed", outcome: completion!.outcome, owner: null,
          deadline: now() + limits.retention * 1000 }); // the window opens at completion
      }
      return true;
    } catch (error) {
      throw failed(error);
    } finally {
      this.letGo();
    }
  }

  /** Every statement undone. */
  protected async abandon(): Promise<void> {
    try {
      if (this.store.data.inTransaction) this.store.data.exec("ROLLBACK");
    } catch (error) {
      throw failed(error);
    } finally {
      this.letGo();
    }
  }

  /** Whatever happened, the unit of work is over and the tools' tables free for the next. */
  protected letGo(): void {
    this.ended = true;
    if (!this.begun) return;
    this.begun = false;
    try {
      if (this.store.data.inTransaction) this.store.data.exec("ROLLBACK"); // the ending failed part way
    } finally {
      this.store.turn.release();
    }
  }
}
