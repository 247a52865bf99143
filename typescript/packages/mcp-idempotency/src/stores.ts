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

export interface Store {
  readonly limits: Limits;
  /** The record that holds `key`, or the key taken for `principal`, unless the store or that share is full. */
  claim(key: string, fingerprint: Uint8Array, principal: string): Promise<Claim>;
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
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
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
