// The SQLite store on real files in a temporary folder: the Python library's statements, the claim, its replay,
// conflict and in progress, a takeover only after the lease, fencing, the tool's unit of work, two stores on one file.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SQLiteStore, StoreUnavailable, limitsOf, openStore } from "../src/index.js";
import type { StoreOptions } from "../src/index.js";
import * as statements from "../src/sqlite-statements.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => { for (const cleanup of cleanups.splice(0).reverse()) await cleanup(); });

/** A new folder, removed after the test: the path of a file in it. */
function file(): string {
  const folder = mkdtempSync(join(tmpdir(), "sep3182-sqlite-"));
  cleanups.push(() => rmSync(folder, { recursive: true, force: true }));
  return join(folder, "store.db");
}

const LEDGER = ["CREATE TABLE IF NOT EXISTS ledger (n bigint NOT NULL, CHECK (n >= 0))",
  "INSERT INTO ledger SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)"];

/** A store on `path`, closed after the test, whose clock is `clock.now` (seconds) when given. */
async function opened(path: string, options: StoreOptions = {}, clock?: { now: number }): Promise<SQLiteStore> {
  const store = await SQLiteStore.open(path, limitsOf(options), LEDGER, clock && (() => clock.now));
  cleanups.push(() => store.close());
  return store;
}

/** The ledger's count, read in a unit of work of its own. */
async function ledger(store: SQLiteStore): Promise<unknown> {
  const read = store.begin();
  const [[n]] = await read.fetchall("SELECT n FROM ledger") as [[unknown]];
  await read.commit();
  return n;
}

const A = new Uint8Array(32).fill(1);
const B = new Uint8Array(32).fill(2);
const PYTHON = (name: string) => new URL(`../../../../idempotency/mcp_idempotency/stores/${name}`, import.meta.url);

/** Python's string constants of `source`, by name: "..." and """...""" literals, an f-string's {NAME} filled from
 * `names` (the constants before it). */
function pythonStrings(source: string, names: Record<string, string> = {}): Record<string, string> {
  const found: Record<string, string> = { ...names };
  for (const [, name, f, long, short] of source.matchAll(/^([A-Z_]+) = (f?)(?:"""([\s\S]*?)"""|"([^"\n]*)")/gm)) {
    const literal = long ?? short ?? "";
    found[name!] = f ? literal.replace(/\{([A-Z_]+)\}/g, (_, inner: string) => found[inner]!) : literal;
  }
  return found;
}

describe("the SQLite store", () => {
  it("holds the Python library's statements and its store failures as sqlite.py and sql.py spell them", () => {
    const init = readFileSync(PYTHON("__init__.py"), "utf8");
    const version = /^SCHEMA_VERSION = (\d+)$/m.exec(init)![1]!;
    const python = pythonStrings(readFileSync(PYTHON("sqlite.py"), "utf8"), { SCHEMA_VERSION: version });
    expect(String(statements.SCHEMA_VERSION)).toBe(version);
    const names = ["PRINCIPAL", "SHARE_INDEX", "SHARES", "INSERTED", "DELETED", "SCHEMA", "HOLDER", "CLAIM", "COUNT",
      "RUNNING", "IS_NEW", "SHARE_ROWS", "PURGE_MINE", "SHARE_EXCEEDED", "PURGE", "RELEASE", "RENEW", "COMPLETE"] as const;
    for (const name of names) expect([name, statements[name]]).toEqual([name, python[name]]);
    const failures = /STORE_FAILURES = \{([\s\S]*?)\}/.exec(readFileSync(PYTHON("sql.py"), "utf8"))![1]!;
    expect(statements.STORE_FAILURES).toEqual([...failures.matchAll(/^\s*(\d+):/gm)].map((code) => Number(code[1])));
  });

  it("claims a key once, then answers in progress, a conflict, and once completed its replay", async () => {
    const store = await opened(file());
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
    const store = await opened(file(), { lease: 30 }, clock);
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

  it("fences off a completion whose claim was taken over: its writes roll back, the winner's stay", async () => {
    const clock = { now: 1000 };
    const store = await opened(file(), {}, clock);
    await store.claim("k", A, "p");
    clock.now += 31;
    expect((await store.claim("k", A, "p")).kind).toBe("won"); // the same request, past the lease
    const winner = store.begin();
    await winner.execute("UPDATE ledger SET n = n + 1");
    winner.complete("k", A, '{"result":{"n":1}}');
    expect(await winner.commit()).toBe(true);
    const late = store.begin();
    await late.execute("UPDATE ledger SET n = n + 10");
    late.complete("k", A, '{"result":{"n":11}}');
    expect(await late.commit()).toBe(false);
    expect(await ledger(store)).toBe(1);
    expect(await store.claim("k", A, "p")).toMatchObject({ outcome: '{"result":{"n":1}}' });
  });

  it("commits a tool's writes with the record, and counts the rows they changed as PostgreSQL does", async () => {
    const store = await opened(file());
    await store.claim("k", A, "p");
    const tx = store.begin();
    expect(await tx.execute("UPDATE ledger SET n = n + $1", 5)).toBe(1);
    expect(await tx.execute("UPDATE ledger SET n = n + $1 RETURNING n", 2)).toBe(1);
    expect(await tx.execute("SELECT n FROM ledger")).toBe(0);
    expect(await tx.fetchall("SELECT n, $1, $2 FROM ledger", true, null)).toEqual([[7, 1, null]]); // a boolean as 1
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await ledger(store)).toBe(7);
  });

  it("gives a tool its own SQL error as its outcome, not a store failure; the unit of work goes on", async () => {
    const store = await opened(file());
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

  it("rolls a unit of work back whole, and refuses a statement sent after it ended", async () => {
    const store = await opened(file());
    const tx = store.begin();
    await tx.execute("UPDATE ledger SET n = n + 1");
    await tx.rollback();
    await expect(tx.execute("UPDATE ledger SET n = n + 1")).rejects.toBeInstanceOf(StoreUnavailable);
    expect(await ledger(store)).toBe(0);
  });

  it("deduplicates across two stores on one file, each with its own connections", async () => {
    const path = file();
    const [one, two] = await Promise.all([opened(path), opened(path)]); // the schema made once, in turn
    const won = await one.claim("k", A, "p");
    expect(won.kind).toBe("won");
    expect(await two.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    const tx = one.begin();
    await tx.execute("UPDATE ledger SET n = n + 1");
    // While one's unit of work holds the file, two answers the running key in progress without waiting for it.
    expect(await two.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await two.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: '{"result":{}}' });
    expect(await ledger(two)).toBe(1);
  });

  it("waits for another connection's unit of work to claim a new key, and gives up after the store's wait", async () => {
    const path = file();
    const [one, two] = [await opened(path, { lease: 3 }), await opened(path, { lease: 3 })]; // a wait of 1 s
    const holding = one.begin();
    await holding.execute("UPDATE ledger SET n = n + 1");
    const waiting = two.claim("j", A, "p");
    setTimeout(() => void holding.commit(), 200);
    expect((await waiting).kind).toBe("won");
    const stuck = one.begin();
    await stuck.execute("UPDATE ledger SET n = n + 1");
    await expect(two.claim("i", A, "p")).rejects.toThrow(/SQLite: database is locked/);
    await stuck.rollback();
  });

  it("gives a key back only to its holder, and refuses a new key past the principal's share", async () => {
    const store = await opened(file(), { maxRecordsPerPrincipal: 1 });
    const won = await store.claim("k", A, "p");
    await store.release("k", "someone else");
    expect((await store.claim("j", A, "p")).kind).toBe("full");
    expect((await store.claim("j", A, "q")).kind).toBe("won");
    if (won.kind === "won") await store.release("k", won.owner);
    expect((await store.claim("k", B, "p")).kind).toBe("won");
  });

  it("keeps each principal's count equal to its rows: claims, a refusal, a release, its expired records purged", async () => {
    const clock = { now: 1000 };
    const store = await opened(file(), { maxRecordsPerPrincipal: 2, retention: 10, lease: 10 }, clock);
    const counted = () => {
      const all = (sql: string) => store.writer.prepare(sql).raw().all() as [string, number][];
      const rows = all("SELECT principal, count(*) FROM idempotency_records GROUP BY principal ORDER BY principal");
      expect(all("SELECT principal, records FROM idempotency_shares ORDER BY principal")).toEqual(rows);
      expect(all("SELECT n FROM idempotency_record_count")).toEqual([[rows.reduce((n, [, c]) => n + c, 0)]]);
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
    expect(counted()).toEqual({ p: 2, q: 1 });
    expect((await store.claim("k3", A, "p")).kind).toBe("full"); // its share, full of live records
    if (running.kind === "won") await store.release("k2", running.owner);
    expect(counted()).toEqual({ p: 1, q: 1 });
    await completed("k2");
    clock.now += 11; // both of p's records expire: its share is full of expired ones, purged as it claims
    expect((await store.claim("k4", A, "p")).kind).toBe("won");
    expect(counted()).toEqual({ p: 1, q: 1 });
  });

  it("refuses, in one line naming the fix, a missing folder, another schema version, a tools' statement", async () => {
    await expect(openStore({ store: "sqlite:/nonexistent/folder/store.db" }))
      .rejects.toThrow(/^there is no folder \/nonexistent\/folder for the SQLite file: create it, or point the store elsewhere$/);
    const path = file();
    (await opened(path)).writer.exec("PRAGMA user_version = 2");
    await expect(opened(path)).rejects.toThrow(`upgrade it in place with: mcp-idempotency-store upgrade sqlite:${path}`);
    await expect(SQLiteStore.open(file(), limitsOf({}), ["CREATE TABLE t (a)"]))
      .rejects.toThrow(/^the tools' table statement 1 would fail on the next start \(.*already exists\): let it allow/);
  });
});
