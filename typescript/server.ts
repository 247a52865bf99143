// SEP-3182 on the official TypeScript SDK: an McpServer (@modelcontextprotocol/sdk 1.32.2)
// that honours idempotencyKey on tools/call, over stdio or stateless Streamable HTTP.
// TypeScript, strict; `npm run build` compiles it to dist/server.js (README.md says why tsc).
//
//   node typescript/dist/server.js [--transport stdio|http] [--host 127.0.0.1] [--port 8000] [--retention S]
//                                  [--max-records N] [--charge-delay S] [--placement params|meta]
//                                  [--allow-unauthenticated] [--verbose]
//
// Read it top to bottom, in the order of the SEP:
//
// 1. the ledger and its four tools, which know nothing about idempotency;
// 2. the rules that need no SDK: a valid key (P2), the same request (P3), the
//    rejections (P5), and an in-memory store with a window (P8) and a bound (P9);
// 3. the dispatch layer: the SDK's tools/call schema strips idempotencyKey before
//    any handler sees it (README.md: found by running it), so the layer sits in
//    front of the SDK, on the public Transport interface: it reads each raw
//    JSON-RPC message before the SDK does, and each response before it leaves;
// 4. the capability (P11), the command line and the transports.
//
// Ids such as S1 (a rule of SEP-3182, as this project lists them) and P9 (a position it
// takes where the SEP is silent) are this project's: the SEP numbers nothing;
// tests/CONFORMANCE.md lists both. Decisions go to stderr in
// the same words as the Python servers, so tests and the kit can follow them.

import { createHash } from "node:crypto";
import { createServer } from "node:http";
import { BlockList, isIP } from "node:net";
import { parseArgs } from "node:util";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { Transport, TransportSendOptions } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { CallToolResult, JSONRPCErrorResponse, JSONRPCMessage, JSONRPCRequest, JSONRPCResultResponse,
  MessageExtraInfo, RequestId, ServerCapabilities } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

// ----------------------------------------------------------------------------
// The command line
// ----------------------------------------------------------------------------

const RETENTION_SECONDS = 24 * 60 * 60; // P8: the Python servers' default window
const MAX_RECORDS = 10_000; // P9: the Python servers' default bound

interface Settings {
  transport: "stdio" | "http";
  host: string;
  port: number;
  retention: number; // seconds
  maxRecords: number;
  chargeDelay: number; // seconds
  placement: Placement;
  allowUnauthenticated: boolean; // P10': serve one tenant off loopback, on purpose
  verbose: boolean;
}

// P26: where the key is read and the capability advertised. The SEP's: params.idempotencyKey and
// capabilities.tools.idempotency. An extension's (SEP-2133): a vendor-prefixed request _meta key and
// capabilities.extensions, named as mcp_idempotency/rules.py names them (and says why).
type Placement = "params" | "meta";
const EXTENSION_ID = "com.example.sep3182/idempotency";
const META_KEY = "com.example.sep3182/idempotencyKey";

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
    allowUnauthenticated: values["allow-unauthenticated"],
    verbose: values.verbose,
  };
}

const settings = settingsFrom(process.argv.slice(2));

/** One decision of the idempotency layer on stderr, as the Python servers word it (stdout is the protocol). */
function log(line: string): void {
  if (settings.verbose) process.stderr.write(`idempotency: ${line}\n`);
}

// ----------------------------------------------------------------------------
// 1. The ledger and its tools: no idempotency code in this part
// ----------------------------------------------------------------------------

const ledger = { balance: 0, charges: 0 };

/** Apply one charge to the ledger: the side effect that must not happen twice. */
async function charge(amount: number): Promise<CallToolResult> {
  await new Promise((resolve) => setTimeout(resolve, settings.chargeDelay * 1000)); // a slow payment processor
  ledger.balance += amount;
  ledger.charges += 1;
  return { content: [{ type: "text", text: `Charged ${amount}. New balance: ${ledger.balance}` }] };
}

// P3, applied to the demo's tools as in mcp_idempotency/rules.py's Amount: a positive whole
// number; 100 and 100.0 are one JSON number once parsed. zod 4's int() takes safe integers
// only, so an amount beyond 2^53, which JSON.parse has already rounded, is refused with or
// without a key, never charged rounded.
const amount = { amount: z.number().int().positive() };

/** An McpServer with the demo's four tools and the capability (P11). */
function demoServer(): McpServer {
  const server = new McpServer({ name: "sep-3182-demo-ts", version: "1.0" });
  server.registerTool("charge_unguarded",
    { description: "Charge `amount`. The demo calls this one without an idempotencyKey; a key would be honoured.", inputSchema: amount },
    ({ amount }) => charge(amount));
  server.registerTool("charge_guarded",
    { description: "Charge `amount`. The demo calls this one with an idempotencyKey.", inputSchema: amount },
    ({ amount }) => charge(amount));
  server.registerTool("reset_ledger",
    { description: "Test helper: zero the balance and the charge count; recorded keys are kept." },
    () => {
      Object.assign(ledger, { balance: 0, charges: 0 });
      return { content: [{ type: "text", text: "Ledger reset." }] };
    });
  server.registerTool("get_balance",
    { description: "Test helper: the ground truth, the balance and how many charges were applied.",
      annotations: { readOnlyHint: true } },
    () => ({ content: [{ type: "text", text: JSON.stringify(ledger) }] }));
  // P11 (C1), P11': the SDK keeps an unknown capability on the server side, so the
  // initialize result carries tools.idempotency with its settings (its own client's schema
  // drops it): the window in whole seconds, rounded down so that no client counts on time
  // not kept (1.5 s advertises 1). The SDK's type for it knows only tools.listChanged, while
  // its schema is loose and keeps other members at run time, as the initialize result
  // shows: hence the cast. P26: the extension placement needs none, since the SDK types
  // capabilities.extensions (SEP-2133), and its client keeps it.
  const idempotency = { maxKeyLength: MAX_KEY_LENGTH, retentionSeconds: Math.floor(settings.retention) };
  server.server.registerCapabilities(settings.placement === "meta"
    ? { extensions: { [EXTENSION_ID]: idempotency } }
    : { tools: { idempotency } as ServerCapabilities["tools"] });
  return server;
}

// ----------------------------------------------------------------------------
// 2. The rules that need no SDK
// ----------------------------------------------------------------------------

const MAX_KEY_LENGTH = 255; // P2: characters (code points), as the Python servers count them

/** A JSON value, as JSON.parse gives it. */
type Json = null | boolean | number | string | Json[] | { [member: string]: Json };

/** The params of a tools/call as the client sent them, before the SDK strips the key. */
interface CallParams {
  name: string;
  arguments?: { [member: string]: Json };
  idempotencyKey?: unknown;
  _meta?: unknown;
  [member: string]: unknown;
}

/** P1, P26: what the request carries where this server's placement reads a key; a key in the other place is no key. */
function sentKey(params: CallParams): unknown {
  if (settings.placement === "params") return params.idempotencyKey;
  const meta = params._meta;
  return typeof meta === "object" && meta !== null && !Array.isArray(meta)
    ? (meta as Record<string, unknown>)[META_KEY] : undefined; // a malformed _meta is the SDK's to refuse
}

/** P2: why `value` is not a key ("got a number"), or null when it is a string of 1 to 255 characters. */
function keyProblem(value: unknown): string | null {
  if (typeof value === "string") {
    const length = [...value].length;
    return length >= 1 && length <= MAX_KEY_LENGTH ? null : `got ${length} characters`; // never echo it
  }
  if (Array.isArray(value)) return "got an array";
  return `got ${value === null || typeof value === "object" ? "an object" : `a ${typeof value}`}`;
}

/** P3: one spelling of a JSON value: members sorted, numbers by value (-0 is 0), infinities apart from null. */
function canonical(value: Json): string {
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "number") return Object.is(value, -0) ? "0" : String(value);
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  return `{${Object.keys(value).sort().map((name) => `${JSON.stringify(name)}:${canonical(value[name])}`).join(",")}}`;
}

/**
 * P3: integers compare exactly, and JSON.parse has rounded any beyond 2^53 (9007199254740993
 * reads as 9007199254740992), so a keyed call holding an integer-valued number that is not a
 * safe integer, anywhere in its arguments, is refused rather than compared rounded.
 */
function holdsUnsafeInteger(value: Json): boolean {
  if (typeof value === "number") return Number.isInteger(value) && !Number.isSafeInteger(value);
  if (value === null || typeof value !== "object") return false;
  return (Array.isArray(value) ? value : Object.values(value)).some(holdsUnsafeInteger);
}
const UNSAFE_INTEGER = "arguments hold an integer beyond 2^53, which this server cannot compare exactly";

/** P3 (E1-E6): a digest equal for two calls exactly when they name the same tool with equal arguments. */
function fingerprint(params: CallParams): string {
  // E1: only the name and the arguments; _meta (progress token included) is never read.
  // JSON.parse already resolved escapes (E4) and read 1, 1.0 and 1e0 as one number (E3);
  // absent arguments count as {} (P3).
  return createHash("sha256").update(canonical([params.name, params.arguments ?? {}])).digest("hex");
}

const ERROR_CODE = -32602; // P5: the code the Python servers use; clients branch on data.type and data.retryable
type RejectionType = "invalid_idempotency_key" | "idempotency_key_conflict" | "idempotency_key_in_progress"
  | "idempotency_store_full";
const MESSAGES: Record<RejectionType, string> = {
  invalid_idempotency_key: `idempotencyKey must be a string of 1 to ${MAX_KEY_LENGTH} characters`,
  idempotency_key_conflict: "idempotencyKey was already used with a different tool or arguments",
  idempotency_key_in_progress: "a request with this idempotencyKey is still running; retry shortly",
  idempotency_store_full: "the server holds as many idempotency records as it can; retry later",
};
/** P5': the rejections after which the same request, sent again later, may succeed. */
const RETRYABLE = new Set<RejectionType>(["idempotency_key_in_progress", "idempotency_store_full"]);

/** P5, P5': the JSON-RPC error for a rejection; an invalid key is described, not echoed (P2). Never recorded (P6). */
function rejection(type: RejectionType, key?: string, detail?: string) {
  const message = detail === undefined ? MESSAGES[type] : `${MESSAGES[type]}; ${detail}`;
  const retryable = RETRYABLE.has(type);
  return { code: ERROR_CODE, message, data: key === undefined ? { type, retryable } : { type, retryable, idempotencyKey: key } };
}

/**
 * The records, in this process's memory: on stdio the process is its one client's
 * (P10); over HTTP, one tenant for every client (P10'), and one instance only (L2).
 */
interface StoredRecord {
  fingerprint: string; // P3: of the request that claimed the key
  outcome: string | null; // the response without jsonrpc and id, as JSON text; null while running
  expiresAt: number; // seconds since the epoch: running, never (P18'); completed, the window's end (P8)
}
const records = new Map<string, StoredRecord>();

/** P8: drop completed records whose window has passed; a running one is never dropped. */
function dropExpired(now: number): void {
  for (const [key, record] of records) {
    if (record.outcome !== null && record.expiresAt <= now) records.delete(key);
  }
}

/** Python's repr of a key, so that the log reads as the Python servers' (`key='k'`). */
function pythonRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const escaped = [...text].map((c) => {
    if (c === "\\" || c === quote) return `\\${c}`;
    if (c === "\n") return "\\n";
    if (c === "\r") return "\\r";
    if (c === "\t") return "\\t";
    const code = c.codePointAt(0) ?? 0;
    return code < 0x20 || code === 0x7f ? `\\x${code.toString(16).padStart(2, "0")}` : c;
  });
  return `${quote}${escaped.join("")}${quote}`;
}

// ----------------------------------------------------------------------------
// 3. The dispatch layer, in front of the SDK
// ----------------------------------------------------------------------------

/** An answer to a request, and what a key's record keeps of it: all but jsonrpc and id (P6). */
type Response = JSONRPCResultResponse | JSONRPCErrorResponse;
type Outcome = Omit<JSONRPCResultResponse, "jsonrpc" | "id"> | Omit<JSONRPCErrorResponse, "jsonrpc" | "id">;

/** P33: in the extension's placement, a result names the key it honoured in its _meta; an error is left as it is. */
function acknowledged(message: Response, key: string): Response {
  if (settings.placement !== "meta" || !("result" in message)) return message;
  const meta = { ...message.result._meta, [EXTENSION_ID]: { idempotencyKey: key } };
  return { ...message, result: { ...message.result, _meta: meta } };
}

/** Would the SDK accept these tools/call params? If not, it answers them itself and nothing runs. */
function wellFormed(params: unknown): params is CallParams {
  const isObject = (value: unknown): value is Record<string, unknown> =>
    typeof value === "object" && value !== null && !Array.isArray(value);
  return isObject(params) && typeof params.name === "string"
    && (params.arguments === undefined || isObject(params.arguments));
}

/**
 * The SEP's dispatch layer around one SDK transport: every raw message passes here
 * before the SDK parses it (and strips the key), and every response on its way out.
 */
class Idempotent<Inner extends Transport> implements Transport {
  readonly running = new Map<RequestId, string>(); // JSON-RPC id -> the key it claimed, until its outcome is recorded
  readonly cancelled = new Set<RequestId>(); // ids whose client gave up: recorded, never answered
  idle: Promise<void> = Promise.resolve();
  settle: () => void = () => {};
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  onclose?: () => void;
  onerror?: (error: Error) => void;

  constructor(readonly inner: Inner) {}

  // --- the Transport interface the SDK's Protocol talks to ---------------------

  async start(): Promise<void> {
    this.inner.onmessage = (message, extra) => this.receive(message, extra);
    this.inner.onclose = () => this.onclose?.();
    this.inner.onerror = (error) => this.onerror?.(error);
    await this.inner.start();
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    if (("result" in message || "error" in message) && message.id !== undefined) {
      const id = message.id;
      if (this.running.has(id)) message = this.record(id, message);
      if (this.cancelled.delete(id)) return; // P7: the outcome is kept; nobody waits for it
    }
    await this.inner.send(message, options);
  }

  async close(): Promise<void> {
    await this.inner.close();
  }

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  // --- the decisions -----------------------------------------------------------

  /** A raw message from the client: a tools/call is decided here; anything else goes to the SDK as it is. */
  receive(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    const cancelled = "method" in message && message.method === "notifications/cancelled"
      ? (message.params as { requestId?: RequestId } | undefined)?.requestId : undefined;
    if ("method" in message && message.method === "tools/call" && "id" in message && wellFormed(message.params)) {
      this.toolsCall(message, message.params, extra);
    } else if (cancelled !== undefined && this.running.has(cancelled)) {
      // P7: a keyed execution that has started runs to completion and is recorded,
      // so the SDK never hears of this cancel (it would abort the handler and drop
      // the outcome); the response is recorded and then not sent.
      this.cancelled.add(cancelled);
    } else {
      this.onmessage?.(message, extra);
    }
  }

  /** S0-S3 (P4): a tools/call, before the SDK's handler and any tool runs. */
  toolsCall(message: JSONRPCRequest, params: CallParams, extra?: MessageExtraInfo): void | Promise<void> {
    const key = sentKey(params); // P1: only the sibling of name and arguments (or the extension's _meta key, P26)
    if (key === undefined || key === null) {
      log(`no key: tool=${params.name}`);
      return this.onmessage?.(message, extra); // exactly what the server did before
    }
    const problem = keyProblem(key);
    if (problem !== null || typeof key !== "string") {
      log(`invalid key: ${problem}`);
      return this.reject(message, "invalid_idempotency_key", undefined, problem ?? undefined);
    }
    if (holdsUnsafeInteger(params.arguments ?? {})) { // P3: refused, not compared rounded; nothing recorded or run
      log(`unsafe integer: key=${pythonRepr(key)}`);
      return this.inner.send({ jsonrpc: "2.0", id: message.id, error: { code: ERROR_CODE, message: UNSAFE_INTEGER } });
    }
    const now = Date.now() / 1000;
    dropExpired(now);
    const held = records.get(key);
    const print = fingerprint(params);
    if (held === undefined) {
      if (records.size >= settings.maxRecords) { // P9: refuse rather than run without the guarantee
        log(`store full: key=${pythonRepr(key)}`);
        return this.reject(message, "idempotency_store_full", key);
      }
      records.set(key, { fingerprint: print, outcome: null, expiresAt: Infinity }); // P4.1: claimed with its fingerprint
      return this.run(message, key, params.name, extra);
    }
    if (held.fingerprint !== print) { // P4.2: checked first, so a mismatch is a conflict even mid-run
      log(`conflict: key=${pythonRepr(key)} tool=${params.name}`);
      return this.reject(message, "idempotency_key_conflict", key);
    }
    // P4.3 (S1): reject at once, never wait. P18': the run is this process's, alive as long as it is, so
    // it is never taken over; a tool that hangs holds its key until the process ends (its records with it).
    if (held.outcome === null) {
      log(`in progress: key=${pythonRepr(key)}`);
      return this.reject(message, "idempotency_key_in_progress", key);
    }
    log(`replayed: key=${pythonRepr(key)}`); // P4.4 (S2): the recorded outcome; the tool does not run
    const outcome = JSON.parse(held.outcome) as Outcome; // as record() stored it
    return this.inner.send({ ...outcome, jsonrpc: "2.0", id: message.id });
  }

  /** P4.1: the key is this request's: hand it to the SDK, and record what it answers. */
  run(message: JSONRPCRequest, key: string, tool: string, extra?: MessageExtraInfo): void | Promise<void> {
    this.running.set(message.id, key);
    this.idle = new Promise((resolve) => { this.settle = resolve; });
    log(`claimed: key=${pythonRepr(key)} tool=${tool}`);
    return this.onmessage?.(message, extra);
  }

  /** P6, P33: whatever the SDK answered for a claimed key, a result (isError included) or a JSON-RPC error,
   *  recorded and sent with the extension's acknowledgement in a result's _meta, so every replay carries it too. */
  record(id: RequestId, sent: Response): Response {
    const key = this.running.get(id)!; // `running` holds only claimed keys, each with its record
    this.running.delete(id);
    const message = acknowledged(sent, key);
    const { jsonrpc: _, id: __, ...outcome } = message; // the same members in the same order, under any id
    Object.assign(records.get(key)!, { outcome: JSON.stringify(outcome), expiresAt: Date.now() / 1000 + settings.retention });
    log(`recorded: key=${pythonRepr(key)}`);
    if (this.running.size === 0) this.settle();
    return message;
  }

  /** P5: answer a rejection here; the SDK never sees the call and nothing is recorded (P6). */
  reject(message: JSONRPCRequest, type: RejectionType, key?: string, detail?: string): Promise<void> {
    return this.inner.send({ jsonrpc: "2.0", id: message.id, error: rejection(type, key, detail) });
  }
}

// ----------------------------------------------------------------------------
// 4. The transports
// ----------------------------------------------------------------------------

/** stdio: one client, one process; stdout is the protocol, so every log goes to stderr. */
async function serveStdio(): Promise<void> {
  await demoServer().connect(new Idempotent(new StdioServerTransport()));
}

/** Stateless Streamable HTTP with JSON responses: a fresh McpServer and transport per POST, one store. */
function serveHttp(): void {
  const http = createServer(async (request, response) => {
    if (new URL(request.url ?? "/", "http://host").pathname !== "/mcp") {
      response.writeHead(404).end();
      return;
    }
    if (request.method !== "POST") { // stateless: no stream to resume, no session to delete
      response.writeHead(405, { Allow: "POST" }).end();
      return;
    }
    const server = demoServer();
    const transport = new Idempotent(new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true }));
    // P7: a client that goes away must not abort a keyed call (closing aborts every
    // handler), so the server closes once every claimed key's outcome is recorded.
    response.on("close", () => transport.idle.then(() => server.close()));
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
process.stderr.write(`idempotency: serving on ${where}: in-memory store, retention ${settings.retention}s, `
  + `at most ${settings.maxRecords} records, charge delay ${settings.chargeDelay}s\n`);
// K2, P10'': what the records are scoped to, said at start as the 2.x server says it.
process.stderr.write(settings.transport === "stdio"
  ? "idempotency: serving one tenant: this process's one client (stdio, P10'')\n"
  : "idempotency: serving one tenant: no authorisation, every client shares one key space (P10')\n");
if (settings.transport === "stdio") await serveStdio();
else serveHttp();
