// The memory store's unit of work: the records in this process, the tools' tables in a private in-process SQLite
// database, a tool's writes committed with the record's completion or rolled back with it.

import { afterEach, describe, expect, it } from "vitest";
import { MemoryStore, StoreUnavailable, limitsOf, openStore } from "../src/index.js";
import type { Store, StoreOptions } from "../src/index.js";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => { for (const cleanup of cleanups.splice(0).reverse()) await cleanup(); });

const LEDGER = ["CREATE TABLE IF NOT EXISTS ledger (n bigint NOT NULL, CHECK (n >= 0))",
  "INSERT INTO ledger SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)"];

/** A memory store with the ledger, closed after the test, whose clock is `clock.now` (milliseconds) when given. */
function opened(options: StoreOptions = {}, clock?: { now: number }): MemoryStore {
  const store = new MemoryStore(limitsOf(options), clock ? () => clock.now : Date.now, LEDGER);
  cleanups.push(() => store.close());
  return store;
}

/** The ledger's count, read in a unit of work of its own. */
async function ledger(store: Store): Promise<unknown> {
  const read = store.begin();
  const [[n]] = await read.fetchall("SELECT n FROM ledger") as [[unknown]];
  await read.commit();
  return n;
}

const A = new Uint8Array(32).fill(1);
const B = new Uint8Array(32).fill(2);

describe("the memory store's unit of work", () => {
  it("makes the tools' tables as it opens, and refuses one that would fail on the next start", async () => {
    const store = await openStore({ tables: LEDGER });
    cleanups.push(() => store.close());
    expect(store).toBeInstanceOf(MemoryStore);
    expect(await ledger(store)).toBe(0);
    await expect(openStore({ tables: ["CREATE TABLE t (a)"] }))
      .rejects.toThrow(/^the tools' table statement 1 would fail on the next start \(.*already exists\): let it allow/);
    await expect(openStore({ tables: ["CREATE TABLE"] })).rejects.toThrow(/^the tools' table statement 1 failed/);
  });

  it("commits a tool's writes with the record, and counts the rows they changed as PostgreSQL does", async () => {
    const store = opened();
    await store.claim("k", A, "p");
    const tx = store.begin();
    expect(await tx.execute("UPDATE ledger SET n = n + $1", 5)).toBe(1);
    expect(await tx.execute("UPDATE ledger SET n = n + $1 RETURNING n", 2)).toBe(1);
    expect(await tx.execute("SELECT n FROM ledger")).toBe(0);
    expect(await tx.fetchall("SELECT n, $1, $2 FROM ledger", true, null)).toEqual([[7, 1, null]]); // a boolean as 1
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await ledger(store)).toBe(7);
    expect(await store.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: '{"result":{}}' });
  });

  it("fences off a completion whose claim was taken over: its writes roll back, the winner's stay", async () => {
    const clock = { now: 1_000_000 };
    const store = opened({}, clock);
    await store.claim("k", A, "p");
    const late = store.begin();
    await late.execute("UPDATE ledger SET n = n + 10"); // holds the tables from here to its end
    clock.now += 31_000;
    expect((await store.claim("k", A, "p")).kind).toBe("won"); // the same request, past the lease
    const winner = store.begin();
    winner.complete("k", A, '{"result":{"n":0}}');
    expect(await winner.commit()).toBe(true); // first to complete: it wins
    late.complete("k", A, '{"result":{"n":10}}');
    expect(await late.commit()).toBe(false);
    expect(await ledger(store)).toBe(0);
    expect(await store.claim("k", A, "p")).toMatchObject({ outcome: '{"result":{"n":0}}' });
    clock.now += 86_401_000; // the window has passed: the key runs anew
    expect((await store.claim("k", A, "p")).kind).toBe("won");
    const kept = store.begin();
    await kept.execute("UPDATE ledger SET n = n + 1");
    kept.complete("k", A, '{"result":{"n":1}}');
    expect(await kept.commit()).toBe(true);
    const again = store.begin(); // a completion of a key already completed: fenced off too
    await again.execute("UPDATE ledger SET n = n + 100");
    again.complete("k", A, '{"result":{"n":101}}');
    expect(await again.commit()).toBe(false);
    expect(await ledger(store)).toBe(1);
  });

  it("gives a tool its own SQL error as its outcome, not a store failure; the unit of work goes on", async () => {
    const store = opened();
    await store.claim("k", A, "p");
    const tx = store.begin();
    await tx.execute("UPDATE ledger SET n = n + 3");
    const nested = tx.savepoint();
    const broken = tx.execute("UPDATE ledger SET n = n - 100"); // the CHECK fails: the tool's own error
    await expect(broken).rejects.toThrow(/CHECK constraint failed/);
    await expect(broken).rejects.not.toBeInstanceOf(StoreUnavailable);
    await tx.endSavepoint(nested, true);
    await expect(tx.execute("SELECT nope FROM ledger")).rejects.not.toBeInstanceOf(StoreUnavailable);
    tx.complete("k", A, '{"error":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await ledger(store)).toBe(3);
  });

  it("rolls a nested unit of work back alone, and a whole one back, refusing a statement sent after it ended", async () => {
    const store = opened();
    const tx = store.begin();
    await tx.execute("UPDATE ledger SET n = n + 1");
    const nested = tx.savepoint();
    await tx.execute("UPDATE ledger SET n = n + 10");
    await tx.endSavepoint(nested, true);
    expect(await tx.commit()).toBe(true);
    expect(await ledger(store)).toBe(1);
    const undone = store.begin();
    await undone.execute("UPDATE ledger SET n = n + 1");
    await undone.rollback();
    await expect(undone.execute("UPDATE ledger SET n = n + 1")).rejects.toBeInstanceOf(StoreUnavailable);
    expect(await ledger(store)).toBe(1);
  });

  it("completes a record with no statement without taking the tables, and refuses another request's completion", async () => {
    const store = opened();
    await store.claim("k", A, "p");
    const holding = store.begin();
    await holding.execute("UPDATE ledger SET n = n + 1");
    const other = store.begin();
    other.complete("k", B, '{"result":{}}');
    expect(await other.commit()).toBe(false); // another request's fingerprint: fenced off
    const tx = store.begin();
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true); // while `holding` still holds the tables
    await holding.rollback();
  });

  it("runs one unit of work at a time, and gives up after the store's wait", async () => {
    const store = opened({ lease: 0.3 }); // a wait of 0.1 s
    const holding = store.begin();
    await holding.execute("UPDATE ledger SET n = n + 1");
    const stuck = store.begin();
    await expect(stuck.execute("UPDATE ledger SET n = n + 1")).rejects.toThrow(/another unit of work holds the tools' tables/);
    await expect(stuck.commit()).rejects.toBeInstanceOf(StoreUnavailable); // latched: it commits nothing
    const next = store.begin();
    const waiting = next.execute("UPDATE ledger SET n = n + 2");
    expect(await holding.commit()).toBe(true);
    expect(await waiting).toBe(1);
    expect(await next.commit()).toBe(true);
    expect(await ledger(store)).toBe(3);
  });
});
