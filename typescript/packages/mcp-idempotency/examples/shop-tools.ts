// The shop of examples/shop.ts (SDK 1.x) and examples/shop-v2.ts (SDK 2.x): its command line, its store and its
// tools, written once; each entry file makes its SDK line's McpServer, registers these tools on it, and connects it
// through the layer. A payment kept in the store, and a receipt e-mailed elsewhere.
//
//   node dist-examples/shop.js|shop-v2.js --store sqlite:PATH|postgresql://... [--outbox PATH] [--delay S]
//                                         [--retention S] [--lease S] [--max-records N] [--deadline S]
//                                         [--transport stdio|http --port N (shop-v2.js)]
//
// `pay` writes its effect in the store, in the layer's unit of work: the payment and the record of the call
// commit together. `send_receipt` has its effect elsewhere: a line appended to the --outbox file, standing for a
// mail provider's API, given the downstream key as its Idempotency-Key. Both take an account: more arguments than
// the conformance kit's own, which it is given with --tool-arguments.

import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Idempotency } from "mcp-idempotency";
import { z } from "zod";

/** A tool as both lines' registerTool take it: a zod object schema (2.x deprecates a bare shape), and its run. */
export interface ShopTool {
  name: string;
  description: string;
  inputSchema: z.ZodObject;
  run(args: object): Promise<{ content: { type: "text"; text: string }[] }>;
}

export const { values } = parseArgs({ options: {
  store: { type: "string", default: "memory" },
  transport: { type: "string", default: "stdio" },
  port: { type: "string", default: "8000" },
  outbox: { type: "string", default: "outbox.txt" },
  delay: { type: "string", default: "0" },
  retention: { type: "string", default: "86400" },
  lease: { type: "string", default: "30" },
  deadline: { type: "string", default: "600" },
  "max-records": { type: "string", default: "10000" },
} });

const BALANCES = "CREATE TABLE IF NOT EXISTS balances (account text PRIMARY KEY, balance bigint NOT NULL, payments bigint)";

/** The layer over the store the command line names, with the shop's table made in it. */
export const keys = await Idempotency.open({ store: values.store, tables: [BALANCES], retention: Number(values.retention),
  lease: Number(values.lease), maxRecords: Number(values["max-records"]), deadline: Number(values.deadline) });

const payment = z.object({ account: z.string(), amount: z.number().int() });
const text = (line: string) => ({ content: [{ type: "text" as const, text: line }] });

export const tools: ShopTool[] = [
  {
    name: "pay",
    description: "Pay `amount` into `account`, kept in the store.",
    inputSchema: payment,
    async run({ account, amount }: z.infer<typeof payment>) {
      if (amount <= 0) throw new Error("amount must be a positive number");
      await new Promise((resolve) => setTimeout(resolve, Number(values.delay) * 1000));
      const [[balance]] = await keys.transaction(async (tx) => {
        await tx.execute("INSERT INTO balances VALUES ($1, $2, 1) ON CONFLICT (account) DO UPDATE "
          + "SET balance = balances.balance + $2, payments = balances.payments + 1", account, amount);
        return tx.fetchall("SELECT balance FROM balances WHERE account = $1", account);
      }) as [[unknown]];
      return text(`Paid ${amount} into ${account}: balance ${String(balance)}`);
    },
  },
  {
    name: "send_receipt",
    description: "E-mail `account` a receipt for `amount`.",
    inputSchema: payment,
    async run({ account, amount }: z.infer<typeof payment>) {
      appendFileSync(values.outbox, `to ${account}: your payment of ${amount} (Idempotency-Key: ${keys.downstreamKey()})\n`);
      return text(`Receipt for ${amount} sent to ${account}`);
    },
  },
  {
    name: "payments",
    description: "How many payments `account` received, and its balance.",
    inputSchema: z.object({ account: z.string().optional() }),
    async run({ account }: { account?: string }) {
      const [[count, balance]] = await keys.transaction((tx) => tx.fetchall("SELECT coalesce(sum(payments), 0), "
        + "coalesce(sum(balance), 0) FROM balances WHERE CAST($1 AS text) IS NULL OR account = $1", account ?? null)) as [[unknown, unknown]];
      return text(JSON.stringify({ payments: Number(count), balance: Number(balance) }));
    },
  },
];
