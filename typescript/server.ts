// SEP-3182 on the official TypeScript SDK: an McpServer (@modelcontextprotocol/sdk 1.32.2)
// that honours idempotency keys on tools/call, over stdio or stateless Streamable HTTP, built on
// the mcp-idempotency package (packages/mcp-idempotency): the example its README walks through.
// TypeScript, strict; `npm run build` compiles the package, then this file to dist/server.js.
//
//   node typescript/dist/server.js [--transport stdio|http] [--host 127.0.0.1] [--port 8000] [--retention S]
//                                  [--max-records N] [--charge-delay S] [--placement params|meta]
//                                  [--store memory|sqlite:PATH|postgresql://...] [--lease S] [--max-records-per-principal N]
//                                  [--deadline S]
//                                  [--allow-unauthenticated] [--verbose]
//
// 1. the ledger and its four tools, which know nothing about idempotency but the unit of work
//    their charge joins on a SQL store;
// 2. the layer: the package, around the SDK's transport;
// 3. the command line and the transports.
//
// Ids such as P9 (a position this project takes where the SEP is silent) are this project's;
// tests/CONFORMANCE.md lists them. Decisions go to stderr in the same words as the Python
// servers, so tests and the kit can follow them.

import { createServer } from "node:http";
import { BlockList, isIP } from "node:net";
import { parseArgs } from "node:util";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { Idempotency, rules } from "mcp-idempotency";
import { z } from "zod";

// ----------------------------------------------------------------------------
// The command line
// ----------------------------------------------------------------------------

const RETENTION_SECONDS = rules.RETENTION_SECONDS; // P8: the Python servers' default window
const MAX_RECORDS = rules.MAX_RECORDS; // P9: the Python servers' default bound

interface Settings {
  transport: "stdio" | "http";
  host: string;
  port: number;
  retention: number; // seconds
  maxRecords: number;
  chargeDelay: number; // seconds
  placement: Placement;
  store: string; // memory, or sqlite:PATH or postgresql://... shared with other instances in either language
  lease: number; // seconds a dead holder keeps its key on a shared store
  deadline: number; // seconds a keyed run may take before it is stopped and that recorded
  share: number; // one principal's live records at most
  allowUnauthenticated: boolean; // P10': serve one tenant off loopback, on purpose
  verbose: boolean;
}

// P26: where the key is read and the capability advertised. The SEP's: params.idempotencyKey and
// capabilities.tools.idempotency. An extension's (SEP-2133): a vendor-prefixed request _meta key and
// capabilities.extensions, named as mcp_idempotency/rules.py names them (and says why).
type Placement = rules.Placement;

/** A number from the command line, or exit with one line naming the option. */
function number(name: string, text: string, { min, above }: { min?: number; above?: number }): number {
  const value = Number(text);
  if (!Number.isFinite(value) || (above !== undefined && !(value > above)) || (min !== undefined && value < min)) {
    console.error(`server.js: --${name} must be a number ${above !== undefined ? `above ${above}` : `of at least ${min}`}, not ${text}`);
    process.exit(2);
  }
  return value;
}

/** The command line: transport, window, bound, the processor's delay, the decision log. */
function settingsFrom(argv: string[]): Settings {
  const { values } = parseArgs({
    args: argv,
    options: {
      transport: { type: "string", default: "stdio" },
      host: { type: "string", default: "127.0.0.1" },
      port: { type: "string", default: "8000" },
      retention: { type: "string", default: String(RETENTION_SECONDS) },
      "max-records": { type: "string", default: String(MAX_RECORDS) },
      "charge-delay": { type: "string", default: "0" },
      placement: { type: "string", default: "params" },
      store: { type: "string", default: "memory" },
      lease: { type: "string", default: String(rules.LEASE_SECONDS) },
      deadline: { type: "string", default: String(rules.DEADLINE_SECONDS) },
      "max-records-per-principal": { type: "string", default: String(rules.MAX_RECORDS_PER_PRINCIPAL) },
      "allow-unauthenticated": { type: "boolean", default: false },
      verbose: { type: "boolean", default: false },
    },
  });
  if (values.transport !== "stdio" && values.transport !== "http") {
    console.error(`server.js: --transport is stdio or http, not ${values.transport}`);
    process.exit(2);
  }
  if (values.placement !== "params" && values.placement !== "meta") {
    console.error(`server.js: --placement is params or meta, not ${values.placement}`);
    process.exit(2);
  }
  const maxRecords = number("max-records", values["max-records"], { min: 1 });
  if (!Number.isInteger(maxRecords)) number("max-records", "a fraction", { min: 1 });
  return {
    transport: values.transport,
    host: values.host,
    port: number("port", values.port, { min: 0 }),
    retention: number("retention", values.retention, { above: 0 }),
    maxRecords,
    chargeDelay: number("charge-delay", values["charge-delay"], { min: 0 }),
    placement: values.placement,
    store: values.store,
    lease: number("lease", values.lease, { above: 0 }),
    deadline: number("deadline", values.deadline, { above: 0 }),
    share: number("max-records-per-principal", values["max-records-per-principal"], { min: 1 }),
    allowUnauthenticated: values["allow-unauthenticated"],
    verbose: values.verbose,
  };
}

const settings = settingsFrom(process.argv.slice(2));


// ----------------------------------------------------------------------------
// 1. The ledger and its tools
// ----------------------------------------------------------------------------

// On a SQL store the ledger is a table beside the records, as the Python ledger server keeps it
// (mcp_idempotency_demo/ledger.py: the same table and statements), so a charge commits with its
// key's record; on the memory store it is this process's.
const LEDGER_TABLES = [
  `CREATE TABLE IF NOT EXISTS ledger (
        id       integer PRIMARY KEY CHECK (id = 1),
        balance  bigint NOT NULL,
        charges  bigint NOT NULL
    )`,
  "INSERT INTO ledger SELECT 1, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM ledger)",
];

interface Ledger {
  charge(amount: number): Promise<number>; // the new balance
  read(): Promise<{ balance: number; charges: number }>;
  reset(): Promise<void>;
}

/** The ledger in this process. */
function memoryLedger(): Ledger {
  const state = { balance: 0, charges: 0 };
  return {
    charge: async (amount) => { state.balance += amount; state.charges += 1; return state.balance; },
    read: async () => ({ ...state }),
    reset: async () => { Object.assign(state, { balance: 0, charges: 0 }); },
  };
}

/** The ledger in the store, each change in the keyed call's unit of work when there is one. */
function storeLedger(keys: Idempotency): Ledger {
  const row = (sql: string, ...args: unknown[]) => keys.transaction(async (tx) => (await tx.fetchall(sql, ...args))[0] ?? []);
  return {
    charge: async (amount) => Number((await row("UPDATE ledger SET balance = balance + $1, charges = charges + 1 RETURNING balance", amount))[0]),
    read: async () => {
      const [balance, charges] = await row("SELECT balance, charges FROM ledger");
      return { balance: Number(balance), charges: Number(charges) };
    },
    reset: async () => { await keys.transaction((tx) => tx.execute("UPDATE ledger SET balance = 0, charges = 0")); },
  };
}

// P3, applied to the demo's tools as in the Python ledger's Amount: a positive whole number;
// 100 and 100.0 are one JSON number once parsed. zod 4's int() takes safe integers only, so an
// amount beyond 2^53, which JSON.parse has already rounded, is refused with or without a key.
const amount = { amount: z.number().int().positive() };

/** An McpServer with the demo's four tools, the capability advertised by the layer (P11). */
function demoServer(keys: Idempotency, ledger: Ledger): McpServer {
  /** Apply one charge: the side effect that must not happen twice, after a slow payment processor. */
  const charge = async (amount: number): Promise<CallToolResult> => {
    await new Promise((resolve) => setTimeout(resolve, settings.chargeDelay * 1000));
    return { content: [{ type: "text", text: `Charged ${amount}. New balance: ${await ledger.charge(amount)}` }] };
  };
  const server = new McpServer({ name: "sep-3182-demo-ts", version: "1.0" });
  server.registerTool("charge_unguarded",
    { description: "Charge `amount`. The demo calls this one without an idempotencyKey; a key would be honoured.", inputSchema: amount },
    ({ amount }) => charge(amount));
  server.registerTool("charge_guarded",
    { description: "Charge `amount`. The demo calls this one with an idempotencyKey.", inputSchema: amount },
    ({ amount }) => charge(amount));
  server.registerTool("reset_ledger",
    { description: "Test helper: zero the balance and the charge count; recorded keys are kept." },
    async () => {
      await ledger.reset();
      return { content: [{ type: "text", text: "Ledger reset." }] };
    });
  server.registerTool("get_balance",
    { description: "Test helper: the ground truth, the balance and how many charges were applied.",
      annotations: { readOnlyHint: true } },
    async () => ({ content: [{ type: "text", text: JSON.stringify(await ledger.read()) }] }));
  keys.advertise(server);
  return server;
}

// ----------------------------------------------------------------------------
// 3. The transports
// ----------------------------------------------------------------------------

/** stdio: one client, one process; stdout is the protocol, so every log goes to stderr. */
async function serveStdio(keys: Idempotency, ledger: Ledger): Promise<void> {
  await demoServer(keys, ledger).connect(keys.wrap(new StdioServerTransport()));
}

/** Stateless Streamable HTTP with JSON responses: a fresh McpServer and transport per POST, one store. */
function serveHttp(keys: Idempotency, ledger: Ledger): void {
  const http = createServer(async (request, response) => {
    if (new URL(request.url ?? "/", "http://host").pathname !== "/mcp") {
      response.writeHead(404).end();
      return;
    }
    if (request.method !== "POST") { // stateless: no stream to resume, no session to delete
      response.writeHead(405, { Allow: "POST" }).end();
      return;
    }
    const server = demoServer(keys, ledger);
    const transport = keys.wrap(new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true }));
    // P7: a client that goes away does not abort a keyed call: the layer lets the close reach
    // the SDK, which aborts every handler, once every claimed key's outcome is recorded.
    response.on("close", () => void server.close());
    await server.connect(transport);
    await transport.inner.handleRequest(request, response);
  });
  http.listen(settings.port, settings.host);
}

/** P10': with no authorisation, HTTP clients share one key space: a reason not to serve off loopback, or null. */
function unauthenticatedRefusal(): string | null {
  if (settings.transport === "stdio" || settings.allowUnauthenticated) return null;
  const loopback = new BlockList();
  loopback.addSubnet("127.0.0.0", 8, "ipv4");
  loopback.addAddress("::1", "ipv6");
  const family = isIP(settings.host);
  const onLoopback = family === 0 ? settings.host === "localhost" : loopback.check(settings.host, family === 4 ? "ipv4" : "ipv6");
  return onLoopback ? null : `refusing to listen on ${settings.host} without authorisation: every client would `
    + "share one key space and could replay another's results (K2); this server has none: give "
    + "--allow-unauthenticated to do it on purpose";
}

const refusal = unauthenticatedRefusal();
if (refusal !== null) {
  console.error(refusal);
  process.exit(1);
}
const where = settings.transport === "stdio" ? "stdio" : `http://${settings.host}:${settings.port}/mcp`;
const keys = await Idempotency.open({
  store: settings.store, retention: settings.retention, lease: settings.lease, maxRecords: settings.maxRecords,
  deadline: settings.deadline,
  maxRecordsPerPrincipal: settings.share,
  placement: settings.placement,
  tables: LEDGER_TABLES, log: settings.verbose ? (line) => process.stderr.write(`idempotency: ${line}\n`) : undefined,
}).catch((error: unknown) => {
  console.error(`server.js: --store ${settings.store}: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
});
const ledger = settings.store === "memory" ? memoryLedger() : storeLedger(keys);
process.stderr.write(`idempotency: serving on ${where}: ${settings.store === "memory" ? "in-memory" : "shared"} store, retention ${settings.retention}s, `
  + `at most ${settings.maxRecords} records, charge delay ${settings.chargeDelay}s\n`);
// K2, P10'': what the records are scoped to, said at start as the 2.x server says it.
process.stderr.write(settings.transport === "stdio"
  ? "idempotency: serving one tenant: this process's one client (stdio, P10'')\n"
  : "idempotency: serving one tenant: no authorisation, every client shares one key space (P10')\n");
if (settings.transport === "stdio") await serveStdio(keys, ledger);
else serveHttp(keys, ledger);
