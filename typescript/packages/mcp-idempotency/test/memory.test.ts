// What only the memory store does: the tools' tables in a private in-process SQLite database, made as it opens, held by
// one unit of work at a time, and a record completed in this process with or without them. The claim and the unit
// of work it keeps as every store does are unit-of-work.test.ts's.

import { afterEach, describe, expect, it } from "vitest";
import { MemoryStore, StoreUnavailable, openStore } from "../src/index.js";
import { A, B, LEDGER, cleanUp, closedAfter, ledger, openedMemory } from "./stores.js";

afterEach(cleanUp);

describe("the memory store's unit of work", () => {
  it("makes the tools' tables as it opens, and refuses one that would fail on the next start", async () => {
    const store = closedAfter(await openStore({ tables: LEDGER }));
    expect(store).toBeInstanceOf(MemoryStore);
    expect(await ledger(store)).toBe(0);
    await expect(openStore({ tables: ["CREATE TABLE t (a)"] }))
      .rejects.toThrow(/^the tools' table statement 1 would fail on the next start \(.*already exists\): let it allow/);
    await expect(openStore({ tables: ["CREATE TABLE"] })).rejects.toThrow(/^the tools' table statement 1 failed/);
  });

  it("fences off a completion whose unit of work held the tables from before its claim was taken over", async () => {
    const clock = { now: 1000 };
    const store = openedMemory({}, clock);
    await store.claim("k", A, "p");
    const late = store.begin();
    await late.execute("UPDATE ledger SET n = n + 10"); // holds the tables from here to its end
    clock.now += 31;
    expect((await store.claim("k", A, "p")).kind).toBe("won"); // the same request, past the lease
    const winner = store.begin();
    winner.complete("k", A, '{"result":{"n":0}}');
    expect(await winner.commit()).toBe(true); // first to complete: it wins, while `late` still holds the tables
    late.complete("k", A, '{"result":{"n":10}}');
    expect(await late.commit()).toBe(false);
    expect(await ledger(store)).toBe(0);
    expect(await store.claim("k", A, "p")).toMatchObject({ outcome: '{"result":{"n":0}}' });
  });

  it("completes a record with no statement without taking the tables, and refuses another request's completion", async () => {
    const store = openedMemory();
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
    const store = openedMemory({ lease: 0.3 }); // a wait of 0.1 s
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
