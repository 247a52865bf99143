// A SEP-3182 client written against the TypeScript MCP SDK, not the Python one:
// the server's behaviour belongs to the protocol, so any client that puts
// idempotencyKey beside arguments must see the same thing.
//
//   node tests/interop/ts_client.mjs PYTHON SERVER_PY     (exit 0: every check held)

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [python, serverPath] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: python, args: [serverPath], stderr: "ignore" });
const initializeResult = keepInitializeResult(transport);
const client = new Client({ name: "sep-3182-ts-client", version: "1.0.0" });
await client.connect(transport);

/** Keep the initialize result as it came off the wire: the SDK's typed view drops tools.idempotency. */
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

/** A tools/call with the key, if any, beside `arguments` (SEP W1). */
function call(name, args, key) {
  const params = key === undefined ? { name, arguments: args } : { name, arguments: args, idempotencyKey: key };
  return client.request({ method: "tools/call", params }, CallToolResultSchema);
}

/** The error.data.type a call is rejected with, or null if it was not rejected. */
async function rejection(name, args, key) {
  try {
    await call(name, args, key);
    return null;
  } catch (error) {
    return error.data?.type ?? `no data.type in ${error}`;
  }
}

/** Ground truth: the ledger as get_balance reads it. */
async function ledger() {
  return JSON.parse((await call("get_balance", {})).content[0].text);
}

const checks = [
  ["the initialize result on the wire has capabilities.tools.idempotency = {}", async () => {
    assert.deepEqual(initializeResult.capabilities.tools.idempotency, {});
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
  ["the same key with different arguments is idempotency_key_conflict", async () => {
    const key = randomUUID();
    await call("charge_guarded", { amount: 5 }, key);
    assert.equal(await rejection("charge_guarded", { amount: 6 }, key), "idempotency_key_conflict");
    assert.deepEqual(await ledger(), { balance: 105, charges: 2 });
  }],
  ["a key that is not a string is invalid_idempotency_key and runs nothing", async () => {
    assert.equal(await rejection("charge_guarded", { amount: 7 }, 42), "invalid_idempotency_key");
    assert.deepEqual(await ledger(), { balance: 105, charges: 2 });
  }],
  ["without a key, every call runs", async () => {
    await call("charge_guarded", { amount: 1 });
    await call("charge_guarded", { amount: 1 });
    assert.deepEqual(await ledger(), { balance: 107, charges: 4 });
  }],
];

let passed = 0;
for (const [claim, check] of checks) {
  try {
    await check();
    passed += 1;
    console.log(`PASS  ${claim}`);
  } catch (error) {
    console.log(`FAIL  ${claim}: ${error.message}`);
  }
}
await client.close();
console.log(`typescript-sdk: ${passed} passed, ${checks.length - passed} failed`);
process.exit(passed === checks.length ? 0 : 1);
