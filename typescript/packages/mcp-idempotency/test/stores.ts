// What the store tests share: the ledger a tool writes in, two fingerprints, and the memory and SQLite stores opened
// on a clock the test moves, each closed (its folder removed) after the test by cleanUp.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
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

/** What both SQL stores' count tests play: each principal's count, and the store's, equal the rows they count after
 * claims, a refusal at the share, a release, and a principal's expired records purged as it claims. `all` reads a
 * query's rows on the store's database; `expire` lets both of the principal's records pass their window. */
export async function countsFollowTheRows(store: Store, all: (sql: string) => Promise<[string, number][]>,
  expire: () => Promise<void>): Promise<void> {
  const counted = async () => {
    const rows = await all("SELECT principal, CAST(count(*) AS integer) FROM idempotency_records GROUP BY principal ORDER BY principal");
    expect(await all("SELECT principal, CAST(records AS integer) FROM idempotency_shares ORDER BY principal")).toEqual(rows);
    expect(await all("SELECT CAST(n AS integer) FROM idempotency_record_count")).toEqual([[rows.reduce((n, [, c]) => n + c, 0)]]);
    return Object.fromEntries(rows);
  };
  const completed = async (key: string) => {
    expect((await store.claim(key, A, "p")).kind).toBe("won");
    const tx = store.begin();
    tx.complete(key, A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
  };
  await completed("k1");
  const running = await store.claim("k2", A, "p");
  expect((await store.claim("j1", A, "q")).kind).toBe("won");
  expect(await counted()).toEqual({ p: 2, q: 1 });
  expect((await store.claim("k3", A, "p")).kind).toBe("full"); // its share, full of live records
  if (running.kind === "won") await store.release("k2", running.owner);
  expect(await counted()).toEqual({ p: 1, q: 1 });
  await completed("k2");
  await expire();
  expect((await store.claim("k4", A, "p")).kind).toBe("won"); // its share full of expired ones, purged as it claims
  expect(await counted()).toEqual({ p: 1, q: 1 });
}
