// The client half across a server's crash: the example server (typescript/dist/server.js) over HTTP on a SQLite
// store is killed (SIGKILL) during a keyed charge and started again on the same port and the same file; the client,
// used as the README shows, never hears of it but as an answer that came late, and the ledger has one charge.
//
// Before the commit: the charge is still waiting on its payment processor when the process dies, its claim held; the
// client's retries meet a refused connection, then the new process, which answers "in progress" until the dead
// holder's lease (2 s here) passes, then takes the key over and charges. After the commit: the charge was recorded
// and its answer on its way (a proxy in front sees it) when the process dies; the retry is answered from the record.

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { type IncomingMessage, type Server, createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client as ClientV2, StreamableHTTPClientTransport as HttpV2 } from "@modelcontextprotocol/client";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "./ports.js";
import { KeyedClient } from "../src/index.js";

const SERVER = new URL("../../../dist/server.js", import.meta.url).pathname;
const LEASE = "2"; // seconds: short, so that the claim of the process killed mid-run frees soon
const cleanups: (() => unknown)[] = [];
afterEach(async () => { for (const cleanup of cleanups.splice(0).reverse()) await cleanup(); });

/** The example server over HTTP on `port` and the store `store`, with the client half's placement, a short lease
 * and a charge that takes `delay` seconds; `start()` (again) starts a process, `kill()` kills it with SIGKILL, and
 * `log` holds each process's decision log, one entry per process. */
function restartable(port: number, store: string, delay: string) {
  let child: ChildProcess | null = null;
  const server = {
    url: new URL(`http://127.0.0.1:${port}/mcp`),
    log: [] as string[],
    start(): void {
      const started = spawn("node", [SERVER, "--transport", "http", "--port", String(port), "--placement", "meta",
        "--store", store, "--lease", LEASE, "--charge-delay", delay, "--verbose"], { stdio: ["ignore", "ignore", "pipe"] });
      const entry = server.log.push("") - 1;
      started.stderr?.on("data", (chunk: Buffer) => { server.log[entry] += chunk.toString(); });
      child = started;
    },
    kill(): Promise<void> {
      const dying = child;
      child = null;
      if (dying === null || dying.exitCode !== null || dying.signalCode !== null) return Promise.resolve();
      return new Promise((resolve) => { dying.once("exit", () => resolve()); dying.kill("SIGKILL"); });
    },
    /** Once the process listens. */
    async listening(): Promise<void> {
      for (let tries = 0; tries < 200; tries += 1) {
        if (await fetch(server.url, { method: "GET" }).then(() => true, () => false)) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error("the server never listened");
    },
  };
  cleanups.push(() => server.kill());
  return server;
}

/** A folder for the store's file, removed after the test. */
function storeFile(): string {
  const folder = mkdtempSync(join(tmpdir(), "restart-"));
  cleanups.push(() => rmSync(folder, { recursive: true, force: true }));
  return `sqlite:${join(folder, "store.db")}`;
}

/** A connected Client of each line of the SDK, over HTTP to `url`. */
const LINES = {
  "1.x": async (url: URL) => {
    const client = new Client({ name: "restart-test", version: "1" });
    await client.connect(new StreamableHTTPClientTransport(url));
    return client;
  },
  "2.x": async (url: URL) => {
    const client = new ClientV2({ name: "restart-test", version: "1" });
    await client.connect(new HttpV2(url));
    return client;
  },
};

/** The ledger's ground truth. */
async function ledger(keyed: KeyedClient): Promise<{ balance: number; charges: number }> {
  const result = await (await keyed.connected()).callTool({ name: "get_balance", arguments: {} });
  return JSON.parse((result.content as { text: string }[])[0]!.text);
}

/** A proxy in front of `target` that, when the first charge's answer comes back (recorded: the layer commits before
 * it answers), calls `crash` and destroys the client's connection instead of answering. */
async function crashingProxy(target: URL, crash: () => Promise<void>): Promise<URL> {
  let crashed = false;
  const proxy: Server = createServer((incoming, outgoing) => {
    const body: Buffer[] = [];
    incoming.on("data", (chunk: Buffer) => body.push(chunk)).on("end", () => {
      const text = Buffer.concat(body).toString();
      const lose = !crashed && text.includes('"tools/call"') && text.includes("charge_guarded");
      crashed ||= lose;
      const forwarded = request(target, { method: incoming.method, headers: incoming.headers }, (answer: IncomingMessage) => {
        if (!lose) {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(outgoing);
          return;
        }
        answer.resume();
        void crash().then(() => outgoing.destroy());
      });
      forwarded.on("error", () => outgoing.destroy());
      forwarded.end(Buffer.concat(body));
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise((resolve) => { proxy.closeAllConnections(); proxy.close(resolve); }));
  return new URL(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/mcp`);
}

describe.each(Object.entries(LINES))("the client half on the %s Client across a server killed mid-call", (_, connect) => {
  /** A KeyedClient, as the README shows, whose every connection is a new Client over HTTP to `url`. */
  function keyedClient(url: URL): KeyedClient {
    const keyed = new KeyedClient(() => connect(url));
    cleanups.push(() => keyed.close());
    return keyed;
  }

  it("charges once when the server dies before the charge commits, its key taken over after the lease", async () => {
    const server = restartable(await freePort(), storeFile(), "1.5");
    server.start();
    await server.listening();
    const keyed = keyedClient(server.url);
    await keyed.connected();
    const calling = keyed.callTool("charge_guarded", { amount: 30 }, { timeout: 10_000, backoff: 200 });
    await new Promise((resolve) => setTimeout(resolve, 500)); // claimed, waiting on the payment processor
    await server.kill();
    server.start(); // the same port, the same file
    const result = await calling;
    expect(result.content).toEqual([{ type: "text", text: "Charged 30. New balance: 30" }]);
    expect(await ledger(keyed)).toEqual({ balance: 30, charges: 1 });
    const [first, second] = server.log;
    expect(first).toContain("claimed: key=");
    expect(first).not.toContain("recorded: key="); // killed before its commit
    expect(second).toMatch(/in progress: key=[^]*claimed: key=[^]*recorded: key=/); // the lease waited out, then taken over
  });

  it("charges once when the server dies after the charge commits, its answer lost: the retry is answered from the record", async () => {
    const server = restartable(await freePort(), storeFile(), "0");
    server.start();
    await server.listening();
    const url = await crashingProxy(server.url, async () => {
      await server.kill();
      server.start();
    });
    const keyed = keyedClient(url);
    const result = await keyed.callTool("charge_guarded", { amount: 45 }, { timeout: 10_000, backoff: 200 });
    expect(result.content).toEqual([{ type: "text", text: "Charged 45. New balance: 45" }]);
    expect(await ledger(keyed)).toEqual({ balance: 45, charges: 1 });
    const [first, second] = server.log;
    expect(first).toContain("recorded: key="); // killed after its commit
    expect(second).toContain("replayed: key=");
    expect(second).not.toContain("claimed: key=");
  });
});
