// The layer around a real McpServer, driven by the SDK's own Client over its in-memory transport pair:
// every request and answer crosses the JSON-RPC layer as it would over stdio.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { CallToolResultSchema, McpError } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Idempotency, type IdempotencyOptions, rules } from "../src/index.js";

const opened: Idempotency[] = [];
afterEach(async () => { await Promise.all(opened.splice(0).map((keys) => keys.close())); });

/** A server with a counting tool, a slow one, and one that reports its downstream key; a client connected to it. */
async function connected(options: IdempotencyOptions = {}, keys?: Idempotency) {
  const layer = keys ?? await Idempotency.open(options);
  if (keys === undefined) opened.push(layer);
  const effects: { count: number; downstream: (string | undefined)[] } = { count: 0, downstream: [] };
  const server = new McpServer({ name: "test", version: "1" });
  server.registerTool("count", { inputSchema: { by: z.number() } }, async ({ by }) => {
    effects.count += by;
    effects.downstream.push(layer.downstreamKey());
    return { content: [{ type: "text", text: `count ${effects.count}` }] };
  });
  server.registerTool("slow", { inputSchema: { ms: z.number() } }, async ({ ms }) => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    effects.count += 1;
    return { content: [{ type: "text", text: "slow done" }] };
  });
  layer.advertise(server);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(layer.wrap(serverSide));
  const client = new Client({ name: "test-client", version: "1" });
  await client.connect(clientSide);
  return { client, effects, keys: layer };
}

/** A tools/call with the key where the placement reads it. */
function call(client: Client, name: string, args: object, key?: unknown, placement: rules.Placement = "meta") {
  const keyed = key === undefined ? {} : placement === "meta" ? { _meta: { [rules.META_KEY]: key } } : { idempotencyKey: key };
  return client.request({ method: "tools/call", params: { name, arguments: args, ...keyed } }, CallToolResultSchema);
}

/** The JSON-RPC error a call was answered with. */
async function refusal(answer: Promise<unknown>): Promise<McpError> {
  const error = await answer.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(McpError);
  return error as McpError;
}

describe("the capability", () => {
  it("is advertised under the extension with the settings a client plans by", async () => {
    const { client } = await connected({ retention: 90.5, lease: 2.5, deadline: 30 });
    const advertised = (client.getServerCapabilities() as { extensions?: Record<string, unknown> }).extensions;
    expect(advertised?.[rules.EXTENSION_ID]).toEqual({ maxKeyLength: 255, retentionSeconds: 90, deadlineSeconds: 30, leaseSeconds: 3 });
  });
  it("is advertised under tools.idempotency in the field placement, in the raw initialize result", async () => {
    // The SDK's Client drops tools.idempotency as it parses the result: the raw answer carries it.
    const keys = await Idempotency.open({ placement: "params" });
    opened.push(keys);
    const server = new McpServer({ name: "test", version: "1" });
    server.registerTool("count", {}, () => ({ content: [] }));
    keys.advertise(server);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(keys.wrap(serverSide));
    const answer = new Promise<unknown>((resolve) => { clientSide.onmessage = resolve; });
    await clientSide.start();
    await clientSide.send({ jsonrpc: "2.0", id: 1, method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    expect(await answer).toMatchObject({ result: { capabilities: { tools: { idempotency: keys.capability() } } } });
  });
});

describe("a keyed call", () => {
  it("runs once, and its retry replays the first answer with the acknowledgement", async () => {
    const { client, effects } = await connected();
    const first = await call(client, "count", { by: 1 }, "k1");
    const again = await call(client, "count", { by: 1.0 }, "k1");
    expect(effects.count).toBe(1);
    expect(again).toEqual(first);
    expect(first._meta?.[rules.ACKNOWLEDGEMENT]).toEqual({ idempotencyKey: "k1" });
  });
  it("reads the key from params.idempotencyKey in the field placement, and no other place", async () => {
    const { client, effects } = await connected({ placement: "params" });
    await call(client, "count", { by: 1 }, "k", "params");
    await call(client, "count", { by: 1 }, "k", "params");
    await call(client, "count", { by: 1 }, "k", "meta"); // no key here: runs as an unkeyed call
    expect(effects.count).toBe(2);
  });
  it("with other arguments under the same key is a conflict, and nothing runs", async () => {
    const { client, effects } = await connected();
    await call(client, "count", { by: 1 }, "k");
    const error = await refusal(call(client, "count", { by: 2 }, "k"));
    expect([error.code, error.data]).toEqual([-32602, { type: rules.CONFLICT, retryable: false, idempotencyKey: "k" }]);
    expect(effects.count).toBe(1);
  });
  it("sent again while the first runs is in progress at once, retryable", async () => {
    const { client, effects } = await connected();
    const first = call(client, "slow", { ms: 200 }, "k");
    const error = await refusal(call(client, "slow", { ms: 200 }, "k"));
    expect(error.data).toEqual({ type: rules.IN_PROGRESS, retryable: true, idempotencyKey: "k" });
    await first;
    expect(effects.count).toBe(1);
  });
  it("with an invalid key is refused, described and not echoed", async () => {
    const { client, effects } = await connected();
    for (const [key, got] of [["", "0 characters"], ["x".repeat(256), "256 characters"], [7, "a number"], [["k"], "an array"]] as const) {
      const error = await refusal(call(client, "count", { by: 1 }, key));
      expect(error.data).toEqual({ type: rules.INVALID_KEY, retryable: false });
      expect(error.message).toContain(`got ${got}`);
    }
    expect(effects.count).toBe(0);
  });
  it("holding an integer beyond 2^53 is refused, never compared rounded", async () => {
    const { client, effects } = await connected();
    const error = await refusal(call(client, "count", { by: 2 ** 53 + 2 }, "k"));
    expect(error.message).toContain("beyond 2^53");
    expect(effects.count).toBe(0);
  });
  it("forwards one downstream key on every retry, derived from the key and the request", async () => {
    const { client, effects } = await connected({ lease: 0.05 });
    await call(client, "count", { by: 1 }, "k");
    await call(client, "count", { by: 1 }); // unkeyed: no downstream key
    const print = rules.fingerprint("count", { by: 1 });
    expect(effects.downstream).toEqual([rules.downstreamKey(rules.scopedKey(rules.ONE_TENANT, "k"), print), undefined]);
  });
});

describe("the bounds", () => {
  it("refuse a new key once the principal's share is full, retryable, and replay the ones held", async () => {
    const { client, effects } = await connected({ maxRecordsPerPrincipal: 2 });
    await call(client, "count", { by: 1 }, "a");
    await call(client, "count", { by: 1 }, "b");
    const error = await refusal(call(client, "count", { by: 1 }, "c"));
    expect(error.data).toEqual({ type: rules.STORE_FULL, retryable: true, idempotencyKey: "c" });
    await call(client, "count", { by: 1 }, "a");
    expect(effects.count).toBe(2);
  });
  it("give each principal its own keys", async () => {
    let who = "alice";
    const keys = await Idempotency.open({ principal: () => [who] });
    opened.push(keys);
    const { client, effects } = await connected({}, keys);
    await call(client, "count", { by: 1 }, "k");
    who = "bob";
    await call(client, "count", { by: 2 }, "k"); // bob's k is not alice's: no conflict, it runs
    expect(effects.count).toBe(3);
  });
  it("refuse a limit that voids a guarantee, at construction, naming it", async () => {
    await expect(Idempotency.open({ lease: 0 })).rejects.toThrow("lease must be a number above zero");
    await expect(Idempotency.open({ store: "mysql://x" })).rejects.toThrow("use memory, sqlite:PATH or postgresql://");
  });
});

describe("a run's time", () => {
  it("a window that passed lets the key run anew", async () => {
    const { client, effects } = await connected({ retention: 0.05 });
    await call(client, "count", { by: 1 }, "k");
    await new Promise((resolve) => setTimeout(resolve, 80));
    await call(client, "count", { by: 1 }, "k");
    expect(effects.count).toBe(2);
  });
  it("a live run keeps its key past its lease, renewed, so its retry is in progress, not a second run", async () => {
    const { client, effects } = await connected({ lease: 0.08 });
    const first = call(client, "slow", { ms: 300 }, "k");
    await new Promise((resolve) => setTimeout(resolve, 200)); // more than two leases
    const error = await refusal(call(client, "slow", { ms: 300 }, "k"));
    expect(error.data).toMatchObject({ type: rules.IN_PROGRESS });
    await first;
    expect(effects.count).toBe(1);
  });
  it("a run past its deadline is ended, and that it was stopped is recorded: its retry is told so, and runs nothing", async () => {
    const { client, effects } = await connected({ deadline: 0.1 });
    const error = await refusal(call(client, "slow", { ms: 400 }, "k"));
    expect(error.message).toContain("was stopped; its effect is unknown");
    await new Promise((resolve) => setTimeout(resolve, 500)); // the aborted handler's own sleep is over
    const before = effects.count;
    const again = await refusal(call(client, "slow", { ms: 400 }, "k")); // replayed, never claimed anew
    expect(again.message).toBe(error.message);
    expect(effects.count).toBe(before);
  });
  it("each run is stopped at its own deadline, counted from its own start, while one that ends in time is recorded", async () => {
    const { client } = await connected({ deadline: 0.2 });
    const started = performance.now();
    const first = refusal(call(client, "slow", { ms: 1000 }, "a")).then((error) => [error, performance.now() - started] as const);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const second = refusal(call(client, "slow", { ms: 1000 }, "b")).then((error) => [error, performance.now() - started] as const);
    const quick = await call(client, "slow", { ms: 10 }, "c"); // started after both, ends before either deadline
    expect(quick.content).toEqual([{ type: "text", text: "slow done" }]);
    const [[firstError, firstAt], [secondError, secondAt]] = await Promise.all([first, second]);
    expect(firstError.message).toContain("was stopped");
    expect(secondError.message).toContain("was stopped");
    expect(firstAt).toBeGreaterThanOrEqual(190);
    expect(firstAt).toBeLessThan(secondAt);
    expect(secondAt).toBeGreaterThanOrEqual(290);
  });
});
