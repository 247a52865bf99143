// Backward compatibility (issue 25 item 5, docs/backward-compatibility.md): the TypeScript SDK's (1.x) client
// sends one charge twice under one idempotencyKey to a server it starts over stdio, and prints one JSON line:
// the capability on the wire, each answer, and how many charges the two made. Nothing here judges it.
//
//   node tests/interop/ts_compat_client.mjs COMMAND [ARGS...]

import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
let initializeResult;
let deliver;
// The initialize result as it came off the wire: the SDK's typed view drops tools.idempotency.
Object.defineProperty(transport, "onmessage", {
  get: () => deliver,
  set: (handler) => {
    deliver = (message, extra) => {
      if (message.result?.protocolVersion !== undefined) initializeResult = message.result;
      handler(message, extra);
    };
  },
});
const client = new Client({ name: "sep-3182-ts-compat", version: "1.0.0" });
await client.connect(transport);

async function charges() {
  const result = await client.callTool({ name: "get_balance", arguments: {} });
  return JSON.parse(result.content[0].text).charges;
}

const key = randomUUID();
const before = await charges();
const answers = [];
for (let attempt = 0; attempt < 2; attempt++) {
  try {
    const result = await client.request(
      { method: "tools/call", params: { name: "charge_guarded", arguments: { amount: 100 }, idempotencyKey: key } },
      CallToolResultSchema);
    answers.push({ result: result.content[0].text });
  } catch (error) {
    answers.push({ raised: error.constructor.name, code: error.code, message: String(error.message).slice(0, 160) });
  }
}
console.log(JSON.stringify({
  protocol: initializeResult?.protocolVersion,
  capability: initializeResult?.capabilities?.tools?.idempotency ?? null,
  answers,
  charges: (await charges()) - before,
}));
await client.close();
