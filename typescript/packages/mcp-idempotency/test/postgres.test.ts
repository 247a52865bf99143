// The PostgreSQL store on a real server (SEP3182_POSTGRES, which tests/run.py starts), a new database per test:
// the Python library's tables and claim function, the unit of work, the fencing of a late completion.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { PostgresStore, limitsOf } from "../src/index.js";
import type { StoreOptions } from "../src/index.js";
import { A, B, countsFollowTheRows } from "./stores.js";

const SERVER = process.env.SEP3182_POSTGRES;
const dropped: (() => Promise<void>)[] = [];
afterEach(async () => { for (const drop of dropped.splice(0).reverse()) await drop(); });

/** Run one statement on the server's own database. */
async function admin(statement: string): Promise<void> {
  if (!SERVER) throw new Error("no PostgreSQL: set SEP3182_POSTGRES to a server's URL (tests/run.py starts one)");
  const db = new pg.Client({ connectionString: SERVER });
  await db.connect();
  try {
    await db.query(statement);
  } finally {
    await db.end();
  }
}

/** A new, empty database, dropped after the test: its URL. */
async function database(): Promise<string> {
  const name = `sep3182_ts_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  await admin(`CREATE DATABASE ${name}`);
  dropped.push(() => admin(`DROP DATABASE ${name} WITH (FORCE)`));
  return `${SERVER!.slice(0, SERVER!.lastIndexOf("/"))}/${name}`;
}

const LEDGER = ["CREATE TABLE IF NOT EXISTS ledger (n bigint NOT NULL)", "INSERT INTO ledger SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)"];

async function opened(url: string, options: StoreOptions = {}): Promise<PostgresStore> {
  const store = await PostgresStore.open(url, limitsOf(options), LEDGER);
  dropped.push(() => store.close());
  return store;
}

describe("the PostgreSQL store", () => {
  it("holds the Python library's schema files byte for byte", () => {
    for (const name of ["postgres_v4.sql", "postgres_v4_claim.sql"]) {
      const ours = readFileSync(new URL(`../sql/${name}`, import.meta.url), "utf8");
      const python = readFileSync(new URL(`../../../../idempotency/mcp_idempotency/stores/${name}`, import.meta.url), "utf8");
      expect(ours).toBe(python);
    }
  });

  it("claims a key once across two instances, and answers the holder to the other", async () => {
    const url = await database();
    const [one, two] = await Promise.all([opened(url), opened(url)]); // schema made once, under its lock
    const won = await one.claim("k", A, "p");
    expect(won.kind).toBe("won");
    expect(await two.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: null });
    expect(await two.claim("k", B, "p")).toMatchObject({ kind: "held", fingerprint: A });
  });

  it("commits a tool's write with the record's completion, and replays the outcome", async () => {
    const store = await opened(await database());
    await store.claim("k", A, "p");
    const tx = store.begin();
    await tx.execute("UPDATE ledger SET n = n + $1", 5);
    tx.complete("k", A, '{"result":{}}');
    expect(await tx.commit()).toBe(true);
    expect(await store.claim("k", A, "p")).toEqual({ kind: "held", fingerprint: A, outcome: '{"result":{}}' });
    const read = store.begin();
    expect(await read.fetchall("SELECT n FROM ledger")).toEqual([["5"]]);
    await read.commit();
  });

  it("fences off a completion whose lease passed and was taken over: its writes roll back", async () => {
    const store = await opened(await database(), { lease: 1 });
    const first = await store.claim("k", A, "p");
    const late = store.begin();
    await late.execute("UPDATE ledger SET n = n + 1");
    await new Promise((resolve) => setTimeout(resolve, 1100)); // past the lease, within the session's idle limit
    const takeover = await store.claim("k", A, "p"); // the same request takes the key over
    expect(takeover.kind).toBe("won");
    expect(first.kind === "won" && await store.renew("k", first.owner)).toBe(false);
    const winner = store.begin();
    winner.complete("k", A, '{"result":{"n":1}}');
    expect(await winner.commit()).toBe(true);
    late.complete("k", A, '{"result":{"n":2}}');
    expect(await late.commit()).toBe(false);
    const read = store.begin();
    expect(await read.fetchall("SELECT n FROM ledger")).toEqual([["0"]]);
    await read.commit();
  });

  it("rolls a nested unit of work back alone, keeping the rest", async () => {
    const store = await opened(await database());
    const tx = store.begin();
    await tx.execute("UPDATE ledger SET n = n + 1");
    const nested = tx.savepoint();
    await tx.execute("UPDATE ledger SET n = n + 10");
    await tx.endSavepoint(nested, true);
    await tx.commit();
    const read = store.begin();
    expect(await read.fetchall("SELECT n FROM ledger")).toEqual([["1"]]);
    await read.commit();
  });

  it("gives a key back only to its holder, and refuses a new key past the principal's share", async () => {
    const store = await opened(await database(), { maxRecordsPerPrincipal: 1 });
    const won = await store.claim("k", A, "p");
    await store.release("k", "someone else");
    expect((await store.claim("j", A, "p")).kind).toBe("full");
    expect((await store.claim("j", A, "q")).kind).toBe("won"); // another principal's share
    if (won.kind === "won") await store.release("k", won.owner);
    expect((await store.claim("k", B, "p")).kind).toBe("won");
  });

  it("keeps each principal's count equal to its rows: claims, a refusal, a release, its expired records purged", async () => {
    const url = await database();
    const store = await opened(url, { maxRecordsPerPrincipal: 2, retention: 1, lease: 1 });
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    dropped.push(() => db.end());
    await countsFollowTheRows(store, async (sql) => (await db.query({ text: sql, rowMode: "array" })).rows as [string, number][],
      () => new Promise((done) => setTimeout(done, 1500))); // on the database's clock
  });

  it("refuses a database of another schema version in one line", async () => {
    const url = await database();
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    await db.query("CREATE TABLE idempotency_schema (version integer NOT NULL); INSERT INTO idempotency_schema VALUES (2)");
    await db.end();
    await expect(PostgresStore.open(url, limitsOf({}))).rejects.toThrow(/schema version 2.*mcp-idempotency-store upgrade/);
  });
});
