// The client half: one idempotency key per logical tools/call, sent again until answered.
//
//   const keyed = new KeyedClient(async () => { const c = new Client(info); await c.connect(transport()); return c; });
//   const result = await keyed.callTool("send_email", { to: "ada@example.com" });
//
// 1. mint one key for the logical call, before the first attempt;
// 2. send tools/call with the key in the extension's _meta key (or params.idempotencyKey);
// 3. a timeout, a reset, a cut stream or a closed connection leaves the outcome unknown: send the
//    very same request again, same key, same arguments, after a jittered back-off, on a new
//    connection if the old one broke;
// 4. a rejection says whether to send it again: error.data.retryable (in progress, store full,
//    store unavailable mean "come back later");
// 5. a conflict or an invalid key is final: KeyRefused;
// 6. anything else is the call's answer, a result (isError included) or another JSON-RPC error.
//
// The server's advertised settings bound the loop: no attempt is made retentionSeconds or more after
// the first, when the server may have forgotten the key and would run the call again (WindowPassed).

import { randomUUID } from "node:crypto";
import * as rules from "./rules.js";

/** A tools/call result, as either line's Client gives it. */
export interface CallToolResult {
  content?: unknown;
  isError?: boolean;
  structuredContent?: unknown;
  _meta?: { [member: string]: unknown };
  [member: string]: unknown;
}

/** A connected Client of either line of the official SDK: 1.x (`@modelcontextprotocol/sdk`) or 2.x
 * (`@modelcontextprotocol/client`). They differ in callTool's arguments (1.x takes a result schema before the
 * options), told apart by what only 2.x has, getProtocolEra. */
export interface ClientLike {
  getServerCapabilities(): object | undefined;
  callTool(params: { name: string; arguments?: Record<string, unknown>; _meta?: object }, ...rest: never[]): Promise<CallToolResult>;
  close(): Promise<void>;
}

/** One tools/call on `client`, waiting `timeout` ms for its answer, on either line. */
async function callOn(client: ClientLike, params: { name: string; arguments: Record<string, unknown> }, timeout: number): Promise<CallToolResult> {
  const call = client.callTool as (...args: unknown[]) => Promise<CallToolResult>;
  return "getProtocolEra" in client
    ? call.call(client, params, { timeout })
    : call.call(client, params, undefined, { timeout }); // 1.x: its own CallToolResultSchema by default
}

// The SDKs' errors, told by their codes (the package runs no SDK code; see sdk.ts). An answer's error carries its
// JSON-RPC code, a negative integer; 1.x also gives its own timeout and closed connection JSON-RPC codes, 2.x names
// them. A transport's failure (an HTTP status, a reset, a refused connection) is none of these.
const TIMED_OUT = new Set<unknown>([-32001, "REQUEST_TIMEOUT"]);
const CLOSED = new Set<unknown>([-32000, "CONNECTION_CLOSED"]);
const codeOf = (error: unknown): unknown => (error instanceof Error && "code" in error ? error.code : undefined);

/** A JSON-RPC error, as either SDK throws one: the server's answer, or 1.x's word for a timeout or a closed connection. */
function answered(error: unknown): error is Error & { code: number; data?: unknown } {
  const code = codeOf(error);
  return typeof code === "number" && Number.isInteger(code) && code < 0;
}

/** The server's settings, as it advertises them under the extension. */
export type Settings = rules.Capability;

/** A conflict or an invalid key: sending the call again cannot succeed. */
export class KeyRefused extends Error {
  constructor(readonly type: string, readonly key: string, message: string) {
    super(`${type}: ${message}`);
  }
}

/** The call was never answered within the attempts: `key` and `firstSent` resume it later, unchanged. */
export class GaveUp extends Error {
  constructor(readonly key: string, readonly firstSent: number, readonly lastError: unknown, message = "no answer after every attempt") {
    super(`${message} (key ${key})`);
  }
}

/** The server may have forgotten the key: sending the call again could run it twice. */
export class WindowPassed extends GaveUp {}

export interface KeyedCallOptions {
  /** The logical call's key, to resume one given up on; else one is minted. */
  key?: string;
  /** When the logical call was first sent (ms since the epoch), with `key`. */
  firstSent?: number;
  /** Tries at most. Default 8. */
  attempts?: number;
  /** Milliseconds one attempt waits for its answer. Default 60 s. */
  timeout?: number;
  /** The first back-off in milliseconds, doubled each time, jittered, at most 30 s. Default 250. */
  backoff?: number;
  /** Where the key goes: the extension's _meta key (default), or the SEP's params.idempotencyKey. */
  placement?: rules.Placement;
}

/** The settings a connected client's server advertises under the extension, or null: it gives no guarantee. */
export function discoverSettings(client: ClientLike): Settings | null {
  const extensions = (client.getServerCapabilities() as { extensions?: Record<string, unknown> } | undefined)?.extensions;
  const settings = extensions?.[rules.EXTENSION_ID] as Settings | undefined;
  return settings === undefined ? null : settings;
}

/** An error after which the outcome is unknown: the same request may be sent again. */
function unanswered(error: unknown): boolean {
  return !answered(error) || TIMED_OUT.has(error.code) || CLOSED.has(error.code);
}

/** An error that leaves the connection unusable (a reset, a cut stream, a closed process): the next attempt connects anew. */
function broken(error: unknown): boolean {
  return CLOSED.has(codeOf(error)) || !answered(error) && !TIMED_OUT.has(codeOf(error));
}

/** The rejection's type and whether it may be sent again, or null: not a rejection of the key. */
function rejected(error: unknown): { type: string; retryable: boolean } | null {
  const data = answered(error) ? error.data as { type?: unknown; retryable?: unknown } | undefined : undefined;
  if (typeof data?.type !== "string" || !data.type.startsWith("idempotency_") && data.type !== rules.INVALID_KEY) return null;
  return { type: data.type, retryable: data.retryable === true || rules.RETRYABLE.has(data.type as rules.RejectionType) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client that connects by itself, as often as it must, and sends each logical call with one key. */
export class KeyedClient {
  client: ClientLike | null = null;
  settings: Settings | null = null;

  /** `connect` gives a new connected Client of the official SDK (either line) each time it is called. */
  constructor(readonly connect: () => Promise<ClientLike>) {}

  /** The connected client, connecting if there is none; its server's settings read on the way. */
  async connected(): Promise<ClientLike> {
    if (this.client === null) {
      this.client = await this.connect();
      this.settings = discoverSettings(this.client);
    }
    return this.client;
  }

  /** Drop a connection whose answer was lost; the next attempt connects anew. */
  async dropped(): Promise<void> {
    const client = this.client;
    this.client = null;
    await client?.close().catch(() => {});
  }

  async close(): Promise<void> {
    await this.dropped();
  }

  /** One logical tools/call: sent with one key until it is answered, refused, or given up on. */
  async callTool(name: string, args: Record<string, unknown>, options: KeyedCallOptions = {}): Promise<CallToolResult> {
    const key = options.key ?? randomUUID();
    const firstSent = options.firstSent ?? Date.now();
    const attempts = options.attempts ?? 8;
    const keyed = (options.placement ?? "meta") === "meta" ? { _meta: { [rules.META_KEY]: key } } : { idempotencyKey: key };
    let lastError: unknown = null;
    for (let attempt = 0; attempt < attempts; attempt += 1) {
      if (attempt > 0) await sleep(Math.min(30_000, (options.backoff ?? 250) * 2 ** (attempt - 1)) * (0.5 + Math.random()));
      try {
        const client = await this.connected();
        const window = this.settings?.retentionSeconds;
        if (window !== undefined && Date.now() - firstSent >= window * 1000) {
          throw new WindowPassed(key, firstSent, lastError, "the server's window for this key has passed");
        }
        return await callOn(client, { name, arguments: args, ...keyed }, options.timeout ?? 60_000);
      } catch (error) {
        if (error instanceof WindowPassed) throw error;
        const rejection = rejected(error);
        if (rejection !== null && !rejection.retryable) throw new KeyRefused(rejection.type, key, (error as Error).message);
        if (rejection === null && !unanswered(error)) throw error; // the call's own answer
        if (rejection === null && broken(error)) await this.dropped();
        lastError = error;
      }
    }
    throw new GaveUp(key, firstSent, lastError);
  }
}
