// The memory store: this process's records; a retry that lands on another instance, or after a
// restart, finds nothing. A tool's writes need a SQL store (SQLite, PostgreSQL): here a unit of work
// carries only the record's completion.

import { type Claim, type Limits, type Row, type Store, type Transaction, mayTake, newOwner, same } from "./stores.js";

interface MemoryRecord {
  principal: string;
  fingerprint: Uint8Array;
  status: "running" | "completed";
  deadline: number; // milliseconds since the epoch
  owner: string | null;
  outcome: string | null;
}

export const NO_SQL = "the memory store runs no SQL: a tool that writes in the store needs a sqlite:PATH or postgresql:// store";

export class MemoryStore implements Store {
  readonly records = new Map<string, MemoryRecord>();
  readonly keysOf = new Map<string, Set<string>>(); // principal -> its keys, as the SQL stores' index on principal

  constructor(readonly limits: Limits, readonly now: () => number = Date.now) {}

  async claim(key: string, fingerprint: Uint8Array, principal: string): Promise<Claim> {
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

  /** The first completion of a running key for this request wins; any other is fenced off. */
  completed(key: string, fingerprint: Uint8Array, outcome: string): boolean {
    const record = this.records.get(key);
    if (record?.status !== "running" || !same(record.fingerprint, fingerprint)) return false;
    Object.assign(record, { status: "completed", outcome, owner: null, deadline: this.now() + this.limits.retention * 1000 });
    return true;
  }

  begin(): Transaction {
    return new MemoryTransaction(this);
  }

  async close(): Promise<void> {}
}

class MemoryTransaction implements Transaction {
  completion: [string, Uint8Array, string] | null = null;
  savepoints = 0;

  constructor(readonly store: MemoryStore) {}

  async execute(): Promise<number> {
    throw new Error(NO_SQL);
  }

  async fetchall(): Promise<Row[]> {
    throw new Error(NO_SQL);
  }

  savepoint(): string {
    this.savepoints += 1;
    return `nested_${this.savepoints}`;
  }

  async endSavepoint(): Promise<void> {}

  complete(key: string, fingerprint: Uint8Array, outcome: string): void {
    this.completion = [key, fingerprint, outcome];
  }

  async commit(): Promise<boolean> {
    return this.completion === null || this.store.completed(...this.completion);
  }

  async rollback(): Promise<void> {}
}
