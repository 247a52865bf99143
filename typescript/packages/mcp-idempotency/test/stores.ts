// What the store tests share: the ledger a tool writes in, two fingerprints, and the memory and SQLite stores opened
// on a clock the test moves, each closed (its folder removed) after the test by cleanUp.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryStore, SQLiteStore, limitsOf } from "../src/index.js";
import type { Store, StoreOptions } from "../src/index.js";

export const LEDGER = ["CREATE TABLE IF NOT EXISTS ledger (n bigint NOT NULL, CHECK (n >= 0))",
  "INSERT INTO ledger SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)"];

export const A = new Uint8Array(32).fill(1);
export const B = new Uint8Array(32).fill(2);

/** A clock a test moves by hand: seconds since the epoch. */
export interface Clock { now: number }

const cleanups: (() => Promise<void> | void)[] = [];

/** Close every store and remove every folder the test made, newest first: each test file's afterEach. */
export async function cleanUp(): Promise<void> {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
}

/** `store`, closed after the test. */
export function closedAfter<S extends Store>(store: S): S {
  cleanups.push(() => store.close());
  return store;
}

/** A new folder, removed after the test: the path of a file in it. */
export function file(): string {
  const folder = mkdtempSync(join(tmpdir(), "sep3182-sqlite-"));
  cleanups.push(() => rmSync(folder, { recursive: true, force: true }));
  return join(folder, "store.db");
}

/** A memory store with the ledger, closed after the test, on `clock` when given. */
export function openedMemory(options: StoreOptions = {}, clock?: Clock): MemoryStore {
  return closedAfter(new MemoryStore(limitsOf(options), clock ? () => clock.now * 1000 : Date.now, LEDGER));
}

/** A SQLite store with the ledger on `path`, closed after the test, on `clock` when given. */
export async function openedSQLite(path: string, options: StoreOptions = {}, clock?: Clock): Promise<SQLiteStore> {
  return closedAfter(await SQLiteStore.open(path, limitsOf(options), LEDGER, clock && (() => clock.now)));
}

/** The ledger's count, read in a unit of work of its own. */
export async function ledger(store: Store): Promise<unknown> {
  const read = store.begin();
  const [[n]] = await read.fetchall("SELECT n FROM ledger") as [[unknown]];
  await read.commit();
  return n;
}
