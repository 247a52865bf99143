// A SEP-3182 client written against the TypeScript MCP SDK (1.x), not the Python one:
// the server's behaviour belongs to the protocol, so any client that puts
// idempotencyKey beside arguments must see the same thing, over either transport.
//
//   node tests/interop/ts_client.mjs stdio PYTHON SERVER_PY    (a server it starts, e.g. server.py on mcp 1.x)
//   node tests/interop/ts_client.mjs http URL                  (Streamable HTTP, e.g. the 2.x ledger server on mcp 2.x)
//
// Either way it speaks the 2025-11-25 revision with the initialize handshake.
// Exit 0: every check held. tests/interop/run.sh runs both.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { runChecks, sepChecks, through } from "./checks.mjs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";

const USAGE = "usage: ts_client.mjs stdio PYTHON SERVER_PY | ts_client.mjs http URL";
const [kind, ...where] = process.argv.slice(2);
const transport = transportFor(kind, where);
// server.py (over stdio) advertises the key length and the window; the 2.x server (over HTTP) also how long a key may
// stay in progress: its runs' deadline and a dead holder's lease.
const SETTINGS = kind === "stdio"
  ? { maxKeyLength: 255, retentionSeconds: 86400 }
  : { maxKeyLength: 255, retentionSeconds: 86400, deadlineSeconds: 600, leaseSeconds: 30 };
const initializeResult = keepInitializeResult(transport);
const client = new Client({ name: "sep-3182-ts-client", version: "1.0.0" });
await client.connect(transport);

/** The transport the command line names; the checks below do not know which one they run on. */
function transportFor(kind, where) {
  if (kind === "stdio" && where.length === 2) {
    return new StdioClientTransport({ command: where[0], args: [where[1]], stderr: "ignore" });
  }
  if (kind === "http" && where.length === 1) return new StreamableHTTPClientTransport(new URL(where[0]));
  console.error(USAGE);
  process.exit(2);
}

/**
 * Keep the initialize result as it came off the wire: the SDK's typed view drops tools.idempotency.
 * Both transports hand every parsed JSON-RPC message, unknown fields kept, to the onmessage the
 * Client installs on connect, so wrapping that one setter works for stdio and HTTP alike.
 */
function keepInitializeResult(transport) {
  const kept = {};
  let deliver;
  Object.defineProperty(transport, "onmessage", {
    get: () => deliver,
    set: (handler) => {
      deliver = (message, extra) => {
        if (message.result?.protocolVersion !== undefined) Object.assign(kept, message.result);
        handler(message, extra);
      };
    },
  });
  return kept;
}

/** A tools/call with the key, if any, beside `arguments` (W1). */
function call(name, args, key) {
  const params = key === undefined ? { name, arguments: args } : { name, arguments: args, idempotencyKey: key };
  return client.request({ method: "tools/call", params }, CallToolResultSchema);
}

const { ledger } = through(call);

const checks = [
  ["the handshake is initialize, at this SDK's latest revision", async () => {
    assert.equal(initializeResult.protocolVersion, LATEST_PROTOCOL_VERSION);
  }],
  ["the initialize result on the wire has capabilities.tools.idempotency with its settings (P11')", async () => {
    assert.deepEqual(initializeResult.capabilities.tools.idempotency, SETTINGS);
  }],
  ["a quirk of this SDK, pinned: its typed getServerCapabilities() drops tools.idempotency", async () => {
    assert.equal(client.getServerCapabilities().tools.idempotency, undefined);
  }],
  ["a repeated key replays the original result and charges once", async () => {
    const key = randomUUID();
    const first = await call("charge_guarded", { amount: 100 }, key);
    const retry = await call("charge_guarded", { amount: 100 }, key);
    assert.deepEqual(retry, first);
    assert.deepEqual(await ledger(), { balance: 100, charges: 1 });
  }],
  ...sepChecks(call),
];

await runChecks(`typescript-sdk 1.x over ${kind}`, checks, { call, close: () => client.close() });
