// Where the records live, and the unit of work a tool writes in: one interface, as the Python
// library's stores/__init__.py states it. A record is running (its deadline the lease's end,
// moved on by each renewal) or completed (its deadline the window's end); past its deadline a
// completed record reads as absent, and a running one may be taken over by the same request.

import { randomUUID } from "node:crypto";

/** This call holds the key: it may run the tool; `owner` is its fencing token. */
export interface Won { kind: "won"; owner: string }
/** A record holds the key: its fingerprint, and its outcome once completed (null while running). */
export interface Held { kind: "held"; fingerprint: Uint8Array; outcome: string | null }
/** The store, or the principal's share of it, holds all the live records it may. */
export interface Full { kind: "full" }
export type Claim = Won | Held | Full;

/** The store failed (busy, locked, a lost connection): nothing was recorded. */
export class StoreUnavailable extends Error {}

/** A row a tool's query returns, its columns in the query's order. */
export type Row = unknown[];

/** The windows and bounds every store keeps, in seconds and records. */
export interface Limits {
  retention: number;
  lease: number;
  maxRecords: number;
  maxRecordsPerPrincipal: number;
}

/** The statements of one unit of work: a tool's own, and the record's completion with the commit. */
export interface Transaction {
  /** Run one statement ($1, $2... for its arguments); how many rows it changed. */
  execute(sql: string, ...args: unknown[]): Promise<number>;
  /** Run one query; its rows, as arrays. */
  fetchall(sql: string, ...args: unknown[]): Promise<Row[]>;
  /** Open a nested unit of work; it begins with the next statement. */
  savepoint(): string;
  /** Close a nested unit of work: kept, or rolled back to where it began. */
  endSavepoint(name: string, failed: boolean): Promise<void>;
  /** Complete the key's record with the commit, if it is still running for this request. */
  complete(key: string, fingerprint: Uint8Array, outcome: string): void;
  /** Commit every statement, with the completion if any: false when the completion was fenced off (all rolled back). */
  commit(): Promise<boolean>;
  rollback(): Promise<void>;
}

/** The record a unit of work completes with its commit: the key, the request's fingerprint, the outcome recorded. */
export interface Completion {
  key: string;
  fingerprint: Uint8Array;
  outcome: string;
}

/** One unit of work, its policy written once here for every store, as the Python library's stores/unit_of_work.py:
 *
 * - nothing is sent until the first statement, so a tool that waits before it writes holds nothing meanwhile; the
 *   savepoints asked for before then begin with that statement;
 * - a failure of the store (not of the tool's own SQL) is latched: every later statement and the commit refuse with
 *   it, and the commit rolls everything back, since a unit of work that failed part way must keep nothing;
 * - an error of the tool's own statement is the tool's, passed through as it is: the unit of work goes on;
 * - once it has ended, a statement still coming (a run past its deadline) is refused, rather than beginning a
 *   transaction no one would end;
 * - the commit completes the record with the tool's writes if the key still runs for this request; else everything
 *   is rolled back (the completion is fenced off).
 *
 * A store provides the primitives: `send` (BEGIN and the pending savepoints if need be, then one statement on its
 * connection `C`), `finish` (the completion, then COMMIT or ROLLBACK), `abandon` (ROLLBACK), `letGo` (the store
 * given back after a failure, whatever state it is in), `failureOf` (which of its driver's errors are its own
 * failures rather than the tool's), and the tool's `execute` and `fetchall` in its own terms. */
export abstract class BaseTransaction<C> implements Transaction {
  savepoints: string[] = []; // open savepoints, innermost last
  unsent = 0; // how many of the innermost savepoints have not yet begun
  count = 0; // savepoints opened so far, so each has a name of its own
  ended = false; // committed or rolled back: nothing may be sent through it any more
  failure: StoreUnavailable | null = null; // the store failure this unit of work met, if any
  completion: Completion | null = null;

  /** `where`: the store, named in what this unit of work says. */
  constructor(readonly where: string) {}

  // -- what each store provides --

  /** BEGIN has been sent: the store's connection (or its turn) is held until the end gives it back. */
  abstract readonly begun: boolean;

  /** Run `statement` on the connection, after BEGIN (if not yet begun) and the savepoints `pending()` names. */
  protected abstract send<T>(statement: (connection: C) => T | Promise<T>): Promise<T>;

  /** Apply the completion, if any (beginning for it if need be), then COMMIT if it applied or there was none, else
   * ROLLBACK; the connection given back whatever happens. Whether the completion applied: at once, from a store that
   * needs no I/O for it. */
  protected abstract finish(completion: Completion | null): boolean | Promise<boolean>;

  /** ROLLBACK the begun transaction; the connection given back whatever happens. */
  protected abstract abandon(): Promise<void>;

  /** After a store failure: everything undone and the connection given back, in whatever state the failure left it. */
  protected abstract letGo(): void | Promise<void>;

  /** `error` as a failure of the store, named for the log; null for the tool's own (its SQL, its data). */
  protected abstract failureOf(error: unknown): StoreUnavailable | null;

  abstract execute(sql: string, ...args: unknown[]): Promise<number>;
  abstract fetchall(sql: string, ...args: unknown[]): Promise<Row[]>;

  // -- the policy --

  /** Refused: this unit of work has ended. */
  protected hasEnded(): StoreUnavailable {
    return new StoreUnavailable(`${this.where}: this unit of work has ended`);
  }

  /** Every statement of this unit of work, the tool's and the store's own, goes through here. */
  async run<T>(statement: (connection: C) => T | Promise<T>): Promise<T> {
    if (this.failure !== null) throw this.failure;
    if (this.ended) throw this.hasEnded();
    try {
      return await this.send(statement);
    } catch (error) {
      const failure = this.failureOf(error);
      if (failure === null) throw error;
      this.failure = failure;
      throw failure;
    }
  }

  savepoint(): string {
    this.count += 1;
    const name = `nested_${this.count}`;
    this.savepoints.push(name);
    this.unsent += 1;
    return name;
  }

  /** The names of the savepoints to begin with the next statement, now counted as begun. */
  pending(): string[] {
    const names = this.savepoints.slice(this.savepoints.length - this.unsent);
    this.unsent = 0;
    return names;
  }

  async endSavepoint(name: string, failed: boolean): Promise<void> {
    this.savepoints.splice(this.savepoints.indexOf(name), 1);
    if (this.unsent > 0) this.unsent -= 1; // never begun: nothing ran inside it, nothing to undo
    else if (failed && this.failure === null) await this.execute(`ROLLBACK TO SAVEPOINT ${name}`);
    // A kept savepoint is not released: COMMIT releases it, with no trip of its own.
  }

  complete(key: string, fingerprint: Uint8Array, outcome: string): void {
    this.completion = { key, fingerprint, outcome };
  }

  async commit(): Promise<boolean> {
    if (this.failure !== null) { // a unit of work that failed part way commits nothing
      await this.letGo();
      throw this.failure;
    }
    if (!this.begun && this.completion === null) { // nothing sent, nothing to complete: nothing to commit
      this.ended = true;
      return true;
    }
    if (this.ended) throw this.hasEnded(); // a completion after the end would begin what no one ends
    const applied = this.finish(this.completion);
    return applied instanceof Promise ? await applied : applied; // a promise returned as it is takes two more turns
  }

  async rollback(): Promise<void> {
    if (!this.begun) {
      this.ended = true;
      return;
    }
    await this.abandon();
  }
}

export interface Store {
  readonly limits: Limits;
  /** The record that holds `key`, or the key taken for `principal`, unless the store or that share is full. A store
   * in this process's memory answers at once, with no promise: awaiting one would cost the keyed call a turn. */
  claim(key: string, fingerprint: Uint8Array, principal: string): Claim | Promise<Claim>;
  /** Move `owner`'s lease on by a whole lease; false if the claim is no longer theirs. */
  renew(key: string, owner: string): Promise<boolean>;
  /** Give the key back, if `owner` still holds it, so a retry runs anew. */
  release(key: string, owner: string): Promise<void>;
  /** A new unit of work, not yet started. */
  begin(): Transaction;
  close(): Promise<void>;
}

/** Two fingerprints are one request. */
export function same(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

/** May a claim for `fingerprint` take the key from the record that holds it? Only past its deadline, and a
 * running one only for the same request: another request under the key is a conflict even then. */
export function mayTake(status: "running" | "completed", held: Uint8Array, passed: boolean, fingerprint: Uint8Array): boolean {
  return passed && (status === "completed" || same(held, fingerprint));
}

const PROCESS = randomUUID().replaceAll("-", "");
let claimsMade = 0;

/** A fencing token no other claim has, on any instance. */
export function newOwner(): string {
  claimsMade += 1;
  return `${PROCESS}-${claimsMade}`;
}
