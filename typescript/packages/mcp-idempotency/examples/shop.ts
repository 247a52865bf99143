// A shop written from the package README alone: a payment kept in the store, and a receipt e-mailed elsewhere.
//
//   node dist-examples/shop.js --store sqlite:PATH|postgresql://... [--outbox PATH] [--delay S] [--retention S] [--lease S]
//                              [--max-records N] [--deadline S]
//
// `pay` writes its effect in the store, in the layer's unit of work: the payment and the record of the call
// commit together. `send_receipt` has its effect elsewhere: a line appended to the --outbox file, standing for a
// mail provider's API, given the downstream key as its Idempotency-Key. Both take an account: more arguments than
// the conformance kit's own, which it is given with --tool-arguments. Over stdio.

import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { Idempotency } from "mcp-idempotency";
import { z } from "zod";

const { values } = parseArgs({ options: {
  store: { type: "string", default: "memory" },
  outbox: { type: "string", default: "outbox.txt" },
  delay: { type: "string", default: "0" },
  retention: { type: "string", default: "86400" },
  lease: { type: "string", default: "30" },
  deadline: { type: "string", default: "600" },
  "max-records": { type: "string", default: "10000" },
} });

const BALANCES = "CREATE TABLE IF NOT EXISTS balances (account text PRIMARY KEY, balance bigint NOT NULL, payments bigint)";
const keys = await Idempotency.open({ store: values.store, tables: [BALANCES], retention: Number(values.retention),
  lease: Number(values.lease), maxRecords: Number(values["max-records"]), deadline: Number(values.deadline) });
const server = new McpServer({ name: "shop", version: "1.0" });
const payment = { account: z.string(), amount: z.number().int() };

server.registerTool("pay", { description: "Pay `amount` into `account`, kept in the store.", inputSchema: payment },
  async ({ account, amount }) => {
    if (amount <= 0) throw new Error("amount must be a positive number");
    await new Promise((resolve) => setTimeout(resolve, Number(values.delay) * 1000));
    const [[balance]] = await keys.transaction(async (tx) => {
      await tx.execute("INSERT INTO balances VALUES ($1, $2, 1) ON CONFLICT (account) DO UPDATE "
        + "SET balance = balances.balance + $2, payments = balances.payments + 1", account, amount);
      return tx.fetchall("SELECT balance FROM balances WHERE account = $1", account);
    }) as [[unknown]];
    return { content: [{ type: "text", text: `Paid ${amount} into ${account}: balance ${String(balance)}` }] };
  });

server.registerTool("send_receipt", { description: "E-mail `account` a receipt for `amount`.", inputSchema: payment },
  async ({ account, amount }) => {
    appendFileSync(values.outbox, `to ${account}: your payment of ${amount} (Idempotency-Key: ${keys.downstreamKey()})\n`);
    return { content: [{ type: "text", text: `Receipt for ${amount} sent to ${account}` }] };
  });

server.registerTool("payments", { description: "How many payments `account` received, and its balance.",
  inputSchema: { account: z.string().optional() } },
  async ({ account }) => {
    const [[count, balance]] = await keys.transaction((tx) => tx.fetchall("SELECT coalesce(sum(payments), 0), "
      + "coalesce(sum(balance), 0) FROM balances WHERE CAST($1 AS text) IS NULL OR account = $1", account ?? null)) as [[unknown, unknown]];
    return { content: [{ type: "text", text: JSON.stringify({ payments: Number(count), balance: Number(balance) }) }] };
  });

keys.advertise(server);
await server.connect(keys.wrap(new StdioServerTransport()));
