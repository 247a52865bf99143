// The client half against the example server (typescript/dist/server.js, a real process, built before the tests):
// over stdio with a timeout shorter than the charge, and over HTTP through a proxy that resets or cuts answers;
// on the SDK's 1.x Client, and on the 2.x Client, whose callTool takes other arguments and whose errors are its own.

import { spawn } from "node:child_process";
import { type IncomingMessage, type Server, createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { Client as ClientV2 } from "@modelcontextprotocol/client";
import { StdioClientTransport as StdioV2 } from "@modelcontextprotocol/client/stdio";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "./ports.js";
import { KeyRefused, KeyedClient } from "../src/index.js";

const SERVER = new URL("../../../dist/server.js", import.meta.url).pathname;
const cleanups: (() => unknown)[] = [];
afterEach(async () => { for (const cleanup of cleanups.splice(0).reverse()) await cleanup(); });

/** A KeyedClient whose every connection is a new Client over `transport()`. */
function keyedClient(transport: () => StdioClientTransport | StreamableHTTPClientTransport): KeyedClient {
  const keyed = new KeyedClient(async () => {
    const client = new Client({ name: "keyed-test", version: "1" });
    await client.connect(transport());
    return client;
  });
  cleanups.push(() => keyed.close());
  return keyed;
}

/** The ledger's ground truth, asked on a connection of its own. */
async function ledger(keyed: KeyedClient): Promise<{ balance: number; charges: number }> {
  const result = await (await keyed.connected()).callTool({ name: "get_balance", arguments: {} });
  return JSON.parse((result.content as { text: string }[])[0]!.text);
}

/** The example server over HTTP, in the extension placement, once it listens: its URL. */
async function httpServer(...args: string[]): Promise<URL> {
  const port = await freePort();
  const child = spawn("node", [SERVER, "--transport", "http", "--port", String(port), "--placement", "meta", ...args], { stdio: "ignore" });
  cleanups.push(() => child.kill());
  const url = new URL(`http://127.0.0.1:${port}/mcp`);
  for (let tries = 0; ; tries += 1) {
    const up = await fetch(url, { method: "GET" }).then(() => true, () => false);
    if (up) return url;
    if (tries > 200) throw new Error("the server never listened");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A proxy in front of `target` that loses the answers to the first `losses` tools/call POSTs: "reset" destroys
 * the connection before any answer, "cut" sends the answer's headers and half its body, then destroys it. */
async function lossyProxy(target: URL, kind: "reset" | "cut", losses: number): Promise<{ url: URL; lost: () => number }> {
  let lost = 0;
  const proxy: Server = createServer((incoming, outgoing) => {
    const body: Buffer[] = [];
    incoming.on("data", (chunk: Buffer) => body.push(chunk)).on("end", () => {
      const text = Buffer.concat(body).toString();
      const lose = text.includes('"tools/call"') && text.includes("charge_guarded") && lost < losses;
      if (lose) lost += 1;
      const forwarded = request(target, { method: incoming.method, headers: incoming.headers }, (answer: IncomingMessage) => {
        if (lose && kind === "reset") {
          outgoing.destroy();
          return;
        }
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
        if (!lose) answer.pipe(outgoing);
        else answer.once("data", (chunk: Buffer) => { outgoing.write(chunk.subarray(0, chunk.length >> 1)); outgoing.destroy(); });
      });
      forwarded.end(Buffer.concat(body));
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise((resolve) => proxy.close(resolve)));
  return { url: new URL(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/mcp`), lost: () => lost };
}

describe("the client half", () => {
  it("sends a call that timed out again with its key, and it charges once", async () => {
    const keyed = keyedClient(() => new StdioClientTransport({ command: "node", args: [SERVER, "--placement", "meta", "--charge-delay", "0.6"] }));
    const result = await keyed.callTool("charge_guarded", { amount: 100 }, { timeout: 200, backoff: 100 });
    expect(result.content).toEqual([{ type: "text", text: "Charged 100. New balance: 100" }]);
    expect(await ledger(keyed)).toEqual({ balance: 100, charges: 1 });
  });

  it.each(["reset", "cut"] as const)("survives an answer lost to a %s, reconnecting by itself, to one effect", async (kind) => {
    const proxy = await lossyProxy(await httpServer("--charge-delay", "0.1"), kind, 2);
    const keyed = keyedClient(() => new StreamableHTTPClientTransport(proxy.url));
    const result = await keyed.callTool("charge_guarded", { amount: 40 }, { timeout: 5000, backoff: 100 });
    expect(result.content).toEqual([{ type: "text", text: "Charged 40. New balance: 40" }]);
    expect(proxy.lost()).toBe(2); // two answers lost, the third attempt's replayed
    expect(await ledger(keyed)).toEqual({ balance: 40, charges: 1 });
  });

  it("reads the server's settings, and gives up on a conflict at once with KeyRefused", async () => {
    const keyed = keyedClient(() => new StdioClientTransport({ command: "node", args: [SERVER, "--placement", "meta", "--retention", "90"] }));
    await refusesAConflict(keyed);
  });

  it("does the same on the SDK's 2.x Client, whose callTool and errors are its own", async () => {
    await refusesAConflict(keyedClientV2("--retention", "90"));
  });

  it("sends a call that timed out on the 2.x Client again with its key, and it charges once", async () => {
    const keyed = keyedClientV2("--charge-delay", "0.6");
    const result = await keyed.callTool("charge_guarded", { amount: 100 }, { timeout: 200, backoff: 100 });
    expect(result.content).toEqual([{ type: "text", text: "Charged 100. New balance: 100" }]);
    expect(await ledger(keyed)).toEqual({ balance: 100, charges: 1 });
  });
});

/** A KeyedClient on the SDK's 2.x Client, over stdio to the example server started with `args`. */
function keyedClientV2(...args: string[]): KeyedClient {
  const keyed = new KeyedClient(async () => {
    const client = new ClientV2({ name: "keyed-test", version: "1" });
    await client.connect(new StdioV2({ command: "node", args: [SERVER, "--placement", "meta", ...args] }));
    return client;
  });
  cleanups.push(() => keyed.close());
  return keyed;
}

/** The settings read on connecting; a conflict thrown at once as KeyRefused, the first call's charge alone made. */
async function refusesAConflict(keyed: KeyedClient): Promise<void> {
  await keyed.callTool("charge_guarded", { amount: 1 }, { key: "order-7" });
  expect(keyed.settings).toMatchObject({ retentionSeconds: 90, maxKeyLength: 255 });
  const refused = await keyed.callTool("charge_guarded", { amount: 2 }, { key: "order-7" }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(KeyRefused);
  expect(refused).toMatchObject({ type: "idempotency_key_conflict", key: "order-7" });
  expect(await ledger(keyed)).toEqual({ balance: 1, charges: 1 });
}
