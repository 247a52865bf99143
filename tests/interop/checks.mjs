// What both TypeScript clients check the same way, whatever SDK they are written on:
// the SEP's rejections and the call without a key, read against the ledger; and the
// loop that runs a client's checks and prints one line each.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

/**
 * What a client's own `call(name, args, key)` gives: `rejection(name, args, key)`, the error a
 * call is rejected with as {code, data} (or null), and `ledger()`, the ground truth.
 */
export function through(call) {
  return {
    async rejection(name, args, key) {
      try {
        await call(name, args, key);
        return null;
      } catch (error) {
        return { code: error.code, data: error.data };
      }
    },
    async ledger() {
      return JSON.parse((await call("get_balance", {})).content[0].text);
    },
  };
}

/** The checks every client makes; `call` sends a tools/call with the key, if any, beside `arguments`. */
export function sepChecks(call) {
  const { rejection, ledger } = through(call);
  return [
    ["the same key with different arguments is idempotency_key_conflict", async () => {
      const key = randomUUID();
      await call("charge_guarded", { amount: 5 }, key);
      assert.deepEqual(await rejection("charge_guarded", { amount: 6 }, key),
        { code: -32602, data: { type: "idempotency_key_conflict", retryable: false, idempotencyKey: key } });
      assert.deepEqual(await ledger(), { balance: 5, charges: 1 });
    }],
    ["a key that is not a string is invalid_idempotency_key and runs nothing", async () => {
      assert.deepEqual(await rejection("charge_guarded", { amount: 7 }, 42),
        { code: -32602, data: { type: "invalid_idempotency_key", retryable: false } });
      assert.deepEqual(await ledger(), { balance: 0, charges: 0 });
    }],
    ["an empty key is invalid_idempotency_key and runs nothing", async () => {
      assert.deepEqual(await rejection("charge_guarded", { amount: 7 }, ""),
        { code: -32602, data: { type: "invalid_idempotency_key", retryable: false } });
      assert.deepEqual(await ledger(), { balance: 0, charges: 0 });
    }],
    ["without a key, every call runs", async () => {
      await call("charge_guarded", { amount: 1 });
      await call("charge_guarded", { amount: 1 });
      assert.deepEqual(await ledger(), { balance: 2, charges: 2 });
    }],
  ];
}

/** One line on why a check failed. */
function reason(error) {
  if (error.code !== "ERR_ASSERTION" || !error.generatedMessage) return error.message;
  return `got ${JSON.stringify(error.actual)}, expected ${JSON.stringify(error.expected)}`;
}

/** Run each check from an empty ledger, print PASS or FAIL, then the tally; exit 0 only if all passed. */
export async function runChecks(label, checks, { call, close }) {
  let passed = 0;
  for (const [claim, check] of checks) {
    try {
      await call("reset_ledger", {}); // each check starts from an empty ledger, with keys of its own
      await check();
      passed += 1;
      console.log(`PASS  ${claim}`);
    } catch (error) {
      console.log(`FAIL  ${claim}: ${reason(error)}`);
    }
  }
  await close();
  console.log(`${label}: ${passed} passed, ${checks.length - passed} failed`);
  process.exit(passed === checks.length ? 0 : 1);
}
