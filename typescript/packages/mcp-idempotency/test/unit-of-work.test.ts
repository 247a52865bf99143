// The claim and the unit of work every store in this process keeps alike, run on the memory store and on a SQLite
// file: replay, conflict and in progress, a takeover only after the lease, fencing, a tool's writes committed with
// the record's completion or rolled back with it, and the principal's share.

import { afterEach, describe, expect, it } from "vitest";
import { StoreUnavailable } from "../src/index.js";
import type { Store, StoreOptions } from "../src/index.js";
import { A, B, type Clock, cleanUp, file, ledger, openedMemory, openedSQLite } from "./stores.js";

afterEach(cleanUp);

const STORES: [string, (options?: StoreOptions, clock?: Clock) => Promise<Store>][] = [
  ["memory", async (options, clock) => openedMemory(options, clock)],
  ["SQLite", (options, clock) => openedSQLite(file(), options, clock)],
];

describe.each(STORES)("the %s store's claim and unit of work", (_, opened) => {
  it("claims a key once, then answers in progress, a conflict, and once completed its replay", async () => {
    const store = await opened();
    const won = await store.claim("k", A, "p");
    expect(won.kind).toBe("won");
    expect(await store.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    expect(await store.claim("k", B, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    const tx = store.begin();
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await store.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: '{"result":{}}' });
    expect(await store.claim("k", B, "p")).toEqual({ kind: "held", fingerprint: A, outcome: '{"result":{}}' });
  });

  it("lets the same request take a running key over only once its lease has passed; another is a conflict still", async () => {
    const clock = { now: 1000 };
    const store = await opened({ lease: 30 }, clock);
    const first = await store.claim("k", A, "p");
    clock.now += 29;
    expect((await store.claim("k", A, "p")).kind).toBe("held");
    expect(first.kind === "won" && await store.renew("k", first.owner)).toBe(true); // the lease moves on: to 1059
    clock.now += 30; // 1059: its renewed lease has just passed
    expect(await store.claim("k", B, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    const takeover = await store.claim("k", A, "p");
    expect(takeover.kind).toBe("won");
    expect(first.kind === "won" && await store.renew("k", first.owner)).toBe(false); // no longer its claim
  });

  it("fences off a completion whose claim was taken over, or whose key is already completed: its writes roll back", async () => {
    const clock = { now: 1000 };
    const store = await opened({}, clock);
    await store.claim("k", A, "p");
    clock.now += 31;
    expect((await store.claim("k", A, "p")).kind).toBe("won"); // the same request, past the lease
    const winner = store.begin();
    await winner.execute("UPDATE ledger SET n = n + 1");
    winner.complete("k", A, '{"result":{"n":1}}');
    expect(await winner.commit()).toBe(true); // first to complete: it wins
    const late = store.begin();
    await late.execute("UPDATE ledger SET n = n + 10");
    late.complete("k", A, '{"result":{"n":11}}');
    expect(await late.commit()).toBe(false);
    expect(await ledger(store)).toBe(1);
    expect(await store.claim("k", A, "p")).toMatchObject({ outcome: '{"result":{"n":1}}' });
    clock.now += 86_401; // the window has passed: the key runs anew
    expect((await store.claim("k", A, "p")).kind).toBe("won");
    const kept = store.begin();
    await kept.execute("UPDATE ledger SET n = n + 1");
    kept.complete("k", A, '{"result":{"n":2}}');
    expect(await kept.commit()).toBe(true);
    const again = store.begin(); // a completion of a key already completed: fenced off too
    await again.execute("UPDATE ledger SET n = n + 100");
    again.complete("k", A, '{"result":{"n":102}}');
    expect(await again.commit()).toBe(false);
    expect(await ledger(store)).toBe(2);
  });

  it("commits a tool's writes with the record, and counts the rows they changed as PostgreSQL does", async () => {
    const store = await opened();
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

  it("gives a tool its own SQL error as its outcome, not a store failure; the unit of work goes on", async () => {
    const store = await opened();
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
    const store = await opened();
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

  it("gives a key back only to its holder, and refuses a new key past the principal's share", async () => {
    const store = await opened({ maxRecordsPerPrincipal: 1 });
    const won = await store.claim("k", A, "p");
    await store.release("k", "someone else");
    expect((await store.claim("j", A, "p")).kind).toBe("full");
    expect((await store.claim("j", A, "q")).kind).toBe("won");
    if (won.kind === "won") await store.release("k", won.owner);
    expect((await store.claim("k", B, "p")).kind).toBe("won");
  });
});
