// The SQLite store on real files in a temporary folder, in what only it does: the Python library's statements, two
// stores on one file, the wait for the file, and what it refuses as it opens. The claim and the unit of work it keeps
// as every store does are unit-of-work.test.ts's.

import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { SQLiteStore, limitsOf, openStore } from "../src/index.js";
import * as statements from "../src/sqlite-statements.js";
import { A, cleanUp, countsFollowTheRows, file, ledger, openedSQLite as opened } from "./stores.js";

afterEach(cleanUp);

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

  it("keeps each principal's count equal to its rows: claims, a refusal, a release, its expired records purged", async () => {
    const clock = { now: 1000 };
    const store = await opened(file(), { maxRecordsPerPrincipal: 2, retention: 10, lease: 10 }, clock);
    await countsFollowTheRows(store, async (sql) => store.writer.prepare(sql).raw().all() as [string, number][],
      async () => { clock.now += 11; });
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
