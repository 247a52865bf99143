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
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { type CallToolResult, CallToolResultSchema, ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import * as rules from "./rules.js";

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
export function discoverSettings(client: Client): Settings | null {
  const extensions = (client.getServerCapabilities() as { extensions?: Record<string, unknown> } | undefined)?.extensions;
  const settings = extensions?.[rules.EXTENSION_ID] as Settings | undefined;
  return settings === undefined ? null : settings;
}

/** An error after which the outcome is unknown: the same request may be sent again. */
function unanswered(error: unknown): boolean {
  return error instanceof McpError ? error.code === ErrorCode.RequestTimeout || broken(error) : true;
}

/** An error that leaves the connection unusable (a reset, a cut stream, a closed process): the next attempt connects anew. */
function broken(error: unknown): boolean {
  return !(error instanceof McpError) || error.code === ErrorCode.ConnectionClosed;
}

/** The rejection's type and whether it may be sent again, or null: not a rejection of the key. */
function rejected(error: unknown): { type: string; retryable: boolean } | null {
  const data = error instanceof McpError ? error.data as { type?: unknown; retryable?: unknown } | undefined : undefined;
  if (typeof data?.type !== "string" || !data.type.startsWith("idempotency_") && data.type !== rules.INVALID_KEY) return null;
  return { type: data.type, retryable: data.retryable === true || rules.RETRYABLE.has(data.type as rules.RejectionType) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client that connects by itself, as often as it must, and sends each logical call with one key. */
export class KeyedClient {
  client: Client | null = null;
  settings: Settings | null = null;

  /** `connect` gives a new connected Client of the official SDK each time it is called. */
  constructor(readonly connect: () => Promise<Client>) {}

  /** The connected client, connecting if there is none; its server's settings read on the way. */
  async connected(): Promise<Client> {
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
        const params = { name, arguments: args, ...keyed };
        return await client.request({ method: "tools/call", params }, CallToolResultSchema, { timeout: options.timeout ?? 60_000 });
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
