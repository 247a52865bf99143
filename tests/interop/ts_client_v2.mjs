// A SEP-3182 client on the TypeScript MCP SDK v2 (@modelcontextprotocol/client), which
// implements the 2026-07-28 revision: it opts into version negotiation, so connect()
// probes server/discover and the session speaks 2026-07-28 without an initialize.
//
//   node tests/interop/ts_client_v2.mjs URL    (Streamable HTTP, e.g. the 2.x ledger server on mcp 2.x)
//
// Exit 0: every check held. tests/interop/run.sh runs it.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { runChecks, sepChecks, through } from "./checks.mjs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [url, ...extra] = process.argv.slice(2);
if (url === undefined || extra.length > 0) {
  console.error("usage: ts_client_v2.mjs URL");
  process.exit(2);
}

/** Every HTTP exchange, as sent and as received: the SDK's typed views drop what the checks look for. */
const wire = [];

/** The transport's `fetch` option (public API): record each JSON-RPC frame sent and each JSON reply. */
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const json = response.headers.get("content-type")?.startsWith("application/json");
  wire.push({
    sent: typeof init?.body === "string" ? JSON.parse(init.body) : undefined,
    received: json ? await response.clone().json() : undefined, // this server answers JSON, not SSE
  });
  return response;
}

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
const client = new Client({ name: "sep-3182-ts-client-v2", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
await client.connect(transport);

/** The exchanges whose request was `method`, in order. */
function exchanges(method) {
  return wire.filter(({ sent }) => sent?.method === method);
}

/** The tools/call exchanges that carried this idempotencyKey, in order. */
function keyed(key) {
  return exchanges("tools/call").filter(({ sent }) => sent.params.idempotencyKey === key);
}

/** A tools/call with the key, if any, beside `arguments` (W1); callTool sends params as given. */
function call(name, args, key) {
  return client.callTool(key === undefined ? { name, arguments: args } : { name, arguments: args, idempotencyKey: key });
}

const { ledger } = through(call);

const checks = [
  ["the client negotiated 2026-07-28 through server/discover, with no initialize", async () => {
    assert.equal(client.getNegotiatedProtocolVersion(), "2026-07-28");
    assert.equal(client.getProtocolEra(), "modern");
    assert.equal(wire[0]?.sent?.method, "server/discover");
    assert.equal(exchanges("initialize").length, 0);
  }],
  ["the server/discover result on the wire has capabilities.tools.idempotency with its settings (P11')", async () => {
    assert.deepEqual(exchanges("server/discover")[0]?.received?.result?.capabilities?.tools?.idempotency,
      { maxKeyLength: 255, retentionSeconds: 86400, deadlineSeconds: 600, leaseSeconds: 30 });
  }],
  ["a quirk of this SDK, pinned: its typed getServerCapabilities() and getDiscoverResult() drop tools.idempotency", async () => {
    assert.ok(client.getServerCapabilities().tools, "no tools capability at all");
    assert.equal(client.getServerCapabilities().tools.idempotency, undefined);
    assert.equal(client.getDiscoverResult().capabilities.tools.idempotency, undefined);
  }],
  ["the key goes on the wire beside name and arguments, not inside arguments or _meta", async () => {
    const key = randomUUID();
    await call("charge_guarded", { amount: 100 }, key);
    const sent = keyed(key)[0]?.sent;
    assert.ok(sent, "no tools/call frame on the wire carries the key as params.idempotencyKey");
    assert.equal(sent.params.name, "charge_guarded");
    assert.deepEqual(sent.params.arguments, { amount: 100 });
    assert.equal(sent.params._meta?.idempotencyKey, undefined);
    assert.deepEqual(await ledger(), { balance: 100, charges: 1 });
  }],
  ["a repeated key replays the original result and charges once", async () => {
    const key = randomUUID();
    const first = await call("charge_guarded", { amount: 100 }, key);
    const retry = await call("charge_guarded", { amount: 100 }, key);
    assert.deepEqual(retry, first);
    const [original, replayed] = keyed(key).map(({ received }) => received?.result);
    assert.deepEqual(replayed, original, "the replayed result on the wire differs from the original");
    assert.deepEqual(await ledger(), { balance: 100, charges: 1 });
  }],
  ...sepChecks(call),
];

await runChecks("typescript-sdk v2 (2026-07-28) over http", checks, { call, close: () => client.close() });
