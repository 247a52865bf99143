// SEP-3182's dispatch layer for an McpServer of the official TypeScript SDK, 1.x or 2.x.
//
//   const keys = await Idempotency.open({ store: "postgresql://localhost/app" });
//   keys.advertise(server);
//   await server.connect(keys.wrap(new StdioServerTransport()));
//
// The SDK's tools/call schema strips an unknown params member before any handler sees it, so the
// layer sits in front of the SDK on the public Transport interface: it reads each raw JSON-RPC
// message before the SDK does, and each response before it leaves. Read the key, fingerprint the
// request, claim the key; then conflict, in progress, replay, or run the tool and record its outcome
// in one unit of work with the tool's own writes, the claim's lease renewed while it runs.

import { AsyncLocalStorage } from "node:async_hooks";
import type { JSONRPCErrorResponse, JSONRPCMessage, JSONRPCRequest, JSONRPCResultResponse, MessageExtraInfo, RequestId,
  ServerLike, Transport, TransportSendOptions } from "./sdk.js";
import { type Connectable, registryOf } from "./sdk.js";
import * as rules from "./rules.js";
import type { Json, Placement, Principal, RejectionType } from "./rules.js";
import { type Claim, type Held, type Store, StoreUnavailable, type Transaction, same } from "./stores.js";
import { openStore, type StoreOptions } from "./open.js";

export interface IdempotencyOptions extends StoreOptions {
  /** Where the key is read and the capability written: the extension's _meta key (default) or params.idempotencyKey. */
  placement?: Placement;
  /** Seconds a keyed run may take before the layer ends it, its key given back. */
  deadline?: number;
  maxKeyLength?: number;
  /** Whose call it is: its records are its own. Default: one tenant, every caller. */
  principal?: (extra?: MessageExtraInfo) => Principal;
  /** Where decisions are told, one line each (stdout is the protocol on stdio). Without it, no line is even made. */
  log?: (line: string) => void;
}

/** What a keyed run in progress is, for the tool it runs and for the layer that records it. */
interface Run {
  key: string;
  storeKey: string;
  fingerprint: Uint8Array;
  owner: string;
  tx: Transaction;
  due: number; // performance.now() at which its deadline passes
  stop: () => void; // end it at its deadline: its transport's pastDeadline
  cancelled: boolean;
}

const UNSAFE_INTEGER = "arguments hold an integer beyond 2^53, which this server cannot compare exactly";
// What a run stopped at its deadline tells its caller and every retry of its key, as the Python library says it.
const DEADLINE_PASSED = (seconds: number) => ({
  code: -32603,
  message: `the tool did not finish in ${seconds} s and was stopped; its effect is unknown: check, then use a new key`,
});

// 2026-07-28 carries the revision on every request (the per-request envelope in params._meta), and its results
// name their type; the 2025 revisions have neither. 1.x speaks only the 2025 ones; 2.x both, as the client opens.
const PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion";
const SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo";
const MODERN_REVISIONS: ReadonlySet<unknown> = new Set(["2026-07-28"]);

/** Is this request on 2026-07-28 (its envelope says so), where a result names its type? */
function modern(params: object): boolean {
  const meta = (params as { _meta?: unknown })._meta;
  return typeof meta === "object" && meta !== null && MODERN_REVISIONS.has((meta as Record<string, unknown>)[PROTOCOL_VERSION_META_KEY]);
}

/** Python's repr of a key, so that the log reads as the Python library's (`key='k'`). */
function repr(text: string): string {
  if (!text.includes("'") && !text.includes("\\")) return `'${text}'`; // a UUID, as most keys are: nothing to escape
  return `'${text.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Would the SDK accept these tools/call params? If not, it answers them itself and nothing runs. */
function wellFormed(params: unknown): params is { name: string; arguments?: { [member: string]: Json }; [m: string]: unknown } {
  return isObject(params) && typeof params.name === "string" && (params.arguments === undefined || isObject(params.arguments));
}

/** SEP-3182 for the servers of one process, over one store. */
export class Idempotency {
  readonly running = new Map<string, Run>(); // the store key of every claim run here
  readonly context = new AsyncLocalStorage<Run>();
  readonly renewals: NodeJS.Timeout;
  deadlines: NodeJS.Timeout | undefined; // set for the soonest deadline of the runs here, if any
  readonly placement: Placement;
  readonly deadline: number;
  readonly maxKeyLength: number;
  readonly principal: (extra?: MessageExtraInfo) => Principal;
  readonly log: ((line: string) => void) | undefined;

  constructor(readonly store: Store, options: IdempotencyOptions = {}) {
    this.placement = options.placement ?? rules.DEFAULT_PLACEMENT;
    this.deadline = options.deadline ?? rules.DEADLINE_SECONDS;
    this.maxKeyLength = options.maxKeyLength ?? rules.MAX_KEY_LENGTH;
    this.principal = options.principal ?? (() => rules.ONE_TENANT);
    this.log = options.log;
    for (const [name, value] of [["deadline", this.deadline], ["maxKeyLength", this.maxKeyLength]] as const) {
      if (!(value > 0)) throw new RangeError(`Idempotency: ${name} must be a number above zero, not ${value}`);
    }
    // A live run is never taken over: every quarter lease, each claim running here is renewed.
    this.renewals = setInterval(() => this.renewAll(), (store.limits.lease * 1000) / 4);
    this.renewals.unref();
  }

  /** The layer over the store `options.store` names: memory, sqlite:PATH or postgresql://... */
  static async open(options: IdempotencyOptions = {}): Promise<Idempotency> {
    return new Idempotency(await openStore(options), options);
  }

  async close(): Promise<void> {
    clearInterval(this.renewals);
    clearTimeout(this.deadlines);
    await this.store.close();
  }

  /** The settings a client plans its retries by. */
  capability(): rules.Capability {
    return rules.capability(this.maxKeyLength, this.store.limits.retention, this.deadline, this.store.limits.lease);
  }

  /** Advertise the capability where the placement puts it, on an McpServer of either line (or its Server); call
   * before `connect`. Both lines keep an unknown capability member at run time, in the initialize result and in
   * 2.x's server/discover result alike. */
  advertise(server: ServerLike): void {
    const settings = this.capability();
    registryOf(server).registerCapabilities(this.placement === "meta"
      ? { extensions: { [rules.EXTENSION_ID]: settings } }
      : { tools: { idempotency: settings } });
  }

  /** The transport the McpServer connects to: `server.connect(keys.wrap(transport))`. */
  wrap<Inner extends Transport>(inner: Inner): Keyed<Inner> {
    return new Keyed(this, inner);
  }

  /** The same server, advertising the capability, with every transport it connects to wrapped. For 2.x's entries
   * that serve from a factory of servers and connect each one themselves: `createMcpHandler` (a server per request)
   * and `serveStdio`, which hands messages on from a queue of its own. The layer must sit after that queue: in front
   * of it, two calls read together would run in one context. Give it each server the factory makes. */
  attach<Server extends ServerLike & Connectable>(server: Server): Server {
    this.advertise(server);
    const connect = server.connect.bind(server);
    server.connect = (transport) => connect(this.wrap(transport));
    return server;
  }

  /** In a tool run for a keyed call, the key to forward to the API its effect lives in; undefined without one. */
  downstreamKey(): string | undefined {
    const run = this.context.getStore();
    return run === undefined ? undefined : rules.downstreamKey(run.storeKey, run.fingerprint);
  }

  /** A tool's unit of work in the store: under a keyed call it joins the layer's, as a savepoint, so
   * the tool's writes commit with the record or not at all; else one of its own, committed on success. */
  async transaction<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    const run = this.context.getStore();
    if (run !== undefined) {
      const name = run.tx.savepoint();
      try {
        const result = await work(run.tx);
        await run.tx.endSavepoint(name, false);
        return result;
      } catch (error) {
        await run.tx.endSavepoint(name, true);
        throw error;
      }
    }
    const tx = this.store.begin();
    try {
      const result = await work(tx);
      await tx.commit();
      return result;
    } catch (error) {
      await tx.rollback();
      throw error;
    }
  }

  /** A claimed run starts here. Its deadline is kept by one timer for every run, not a timer each: every run has
   * the same deadline, so the timer is set for the soonest and moved on only when it passes. */
  started(run: Run): void {
    this.running.set(run.storeKey, run);
    if (this.deadlines === undefined) this.deadlines = setTimeout(() => this.stopOverdue(), this.deadline * 1000);
    else if (this.running.size === 1) this.deadlines.ref();
  }

  /** A run is over: recorded, or stopped. With no run left, the timer no longer keeps the process alive. */
  ended(run: Run): void {
    if (this.running.get(run.storeKey) === run) this.running.delete(run.storeKey);
    if (this.running.size === 0) this.deadlines?.unref();
  }

  /** The timer's beat: every run past its deadline is stopped; the timer is set again for the soonest left. */
  stopOverdue(): void {
    this.deadlines = undefined;
    const now = performance.now();
    let soonest = Infinity;
    for (const run of [...this.running.values()]) {
      if (run.due <= now) run.stop();
      else soonest = Math.min(soonest, run.due);
    }
    // A timer may fire a fraction of a millisecond before performance.now() says it is due: then a millisecond on.
    if (soonest !== Infinity) this.deadlines = setTimeout(() => this.stopOverdue(), Math.max(1, Math.ceil(soonest - now)));
  }

  renewAll(): void {
    for (const run of this.running.values()) {
      this.store.renew(run.storeKey, run.owner).then(
        (ours) => { if (!ours) this.log?.(`renewals end: key=${repr(run.key)} is no longer held by this claim`); },
        (error: unknown) => this.log?.(`lease not renewed: key=${repr(run.key)} (${String(error)})`));
    }
  }

  /** The key sent, null for none; an invalid one throws InvalidKey. */
  keyOf(params: Record<string, unknown>): string | null {
    return rules.checkedKey(rules.sentKey(params, this.placement), this.maxKeyLength);
  }

  /** A record holds the key: conflict, in progress, or its replay (the recorded result or error), shaped for the
   * retry's revision, which may not be the first attempt's. */
  answer(held: Held, fingerprint: Uint8Array, key: string, tool: string, onModern = false): { error: object } | { result: object } {
    if (!same(held.fingerprint, fingerprint)) { // checked first, so a mismatch is a conflict even mid-run
      this.log?.(`conflict: key=${repr(key)} tool=${tool}`);
      return { error: rules.rejection(rules.CONFLICT, key) };
    }
    if (held.outcome === null) {
      this.log?.(`in progress: key=${repr(key)}`);
      return { error: rules.rejection(rules.IN_PROGRESS, key) };
    }
    this.log?.(`replayed: key=${repr(key)}`);
    const kept = JSON.parse(held.outcome) as { error?: object; result?: { resultType?: string; _meta?: Record<string, unknown> } };
    if (kept.error !== undefined) return { error: kept.error };
    // Kept with its type (see record), as 2026-07-28 answers it; a 2025 result has no such member, nor the server's
    // info that 2.x stamps on each 2026-07-28 result.
    if (onModern) return { result: { resultType: "complete", ...kept.result } };
    const { resultType: _, _meta: meta, ...result } = kept.result ?? {};
    const { [SERVER_INFO_META_KEY]: __, ...rest } = meta ?? {};
    return { result: meta === undefined ? result : { ...result, _meta: rest } };
  }
}

/** One SDK transport with the layer in front: every raw message passes here before the SDK parses it. */
export class Keyed<Inner extends Transport> implements Transport {
  readonly runs = new Map<RequestId, Run>(); // JSON-RPC id -> its claimed run, until its outcome is recorded
  waiting: Promise<void> | undefined; // what idle gave while runs were left, until they are all recorded
  settle: () => void = () => {};
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  onclose?: () => void;
  onerror?: (error: Error) => void;

  constructor(readonly keys: Idempotency, readonly inner: Inner) {}

  async start(): Promise<void> {
    this.inner.onmessage = (message, extra) => this.receive(message, extra);
    // A keyed run is recorded whatever befalls its connection: the SDK, which aborts its handlers as it closes, is
    // told of the close only once every run here has its outcome recorded, and no answer is sent on the closed one.
    this.inner.onclose = () => {
      for (const run of this.runs.values()) run.cancelled = true;
      void this.idle.then(() => this.onclose?.());
    };
    this.inner.onerror = (error) => this.onerror?.(error);
    await this.inner.start();
  }

  async close(): Promise<void> {
    await this.inner.close();
  }

  /** Settled once every keyed run here has its outcome recorded (made only when asked for, as few callers ask). */
  get idle(): Promise<void> {
    if (this.runs.size === 0) return Promise.resolve();
    this.waiting ??= new Promise((resolve) => { this.settle = resolve; });
    return this.waiting;
  }

  /** No keyed run is left here: whoever waits for idle goes on. */
  settled(): void {
    if (this.runs.size > 0 || this.waiting === undefined) return;
    this.waiting = undefined;
    this.settle();
  }

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  // What the SDK tells or asks of its transport beside messages reaches the transport wrapped: an HTTP transport
  // checks each request's protocol version header against the revisions the server speaks.
  setProtocolVersion(version: string): void {
    this.inner.setProtocolVersion?.(version);
  }

  setSupportedProtocolVersions(versions: string[]): void {
    this.inner.setSupportedProtocolVersions?.(versions);
  }

  get hasPerRequestStream(): boolean | undefined {
    return this.inner.hasPerRequestStream;
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const id = "result" in message || "error" in message ? message.id : undefined;
    const run = id === undefined ? undefined : this.runs.get(id);
    if (id === undefined || run === undefined) return this.inner.send(message, options);
    this.runs.delete(id);
    const answer = await this.record(run, message as JSONRPCResultResponse | JSONRPCErrorResponse);
    this.settled();
    if (!run.cancelled) await this.inner.send(answer, options);
  }

  /** A raw message from the client: a tools/call is decided here; anything else goes to the SDK as it is. */
  receive(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    if ("method" in message && message.method === "tools/call" && "id" in message && wellFormed(message.params)) {
      this.toolsCall(message, message.params, extra).catch((error: unknown) => this.onerror?.(error as Error));
      return;
    }
    const cancelled = "method" in message && message.method === "notifications/cancelled"
      ? this.runs.get((message.params as { requestId?: RequestId } | undefined)?.requestId ?? "") : undefined;
    // A keyed run that has started runs to completion and is recorded: the SDK never hears of the cancel.
    if (cancelled !== undefined) cancelled.cancelled = true;
    else this.onmessage?.(message, extra);
  }

  /** A tools/call, before the SDK's handler and any tool runs. */
  async toolsCall(message: JSONRPCRequest, params: { name: string; arguments?: { [m: string]: Json } }, extra?: MessageExtraInfo): Promise<void> {
    const { keys } = this;
    let key: string | null;
    try {
      key = keys.keyOf(params);
    } catch (bad) {
      keys.log?.(`invalid key: ${(bad as Error).message}`);
      return this.reply(message, { error: rules.rejection(rules.INVALID_KEY, undefined, (bad as Error).message) });
    }
    if (key === null) {
      keys.log?.(`no key: tool=${params.name}`);
      return this.onmessage?.(message, extra); // exactly what the server did before
    }
    if (rules.holdsUnsafeInteger(params.arguments ?? {})) { // refused, not compared rounded; nothing recorded or run
      keys.log?.(`unsafe integer: key=${repr(key)}`);
      return this.reply(message, { error: { code: rules.ERROR_CODE, message: UNSAFE_INTEGER } });
    }
    const fingerprint = rules.fingerprint(params.name, params.arguments);
    const principal = keys.principal(extra);
    const storeKey = rules.scopedKey(principal, key);
    let claim: Claim;
    try {
      const answered = keys.store.claim(storeKey, fingerprint, rules.principalName(principal));
      claim = answered instanceof Promise ? await answered : answered;
    } catch (error) {
      if (!(error instanceof StoreUnavailable)) throw error;
      keys.log?.(`store unavailable: key=${repr(key)} not claimed (${error.message})`);
      return this.reject(message, rules.STORE_UNAVAILABLE, key);
    }
    if (claim.kind === "full") {
      keys.log?.(`store full: key=${repr(key)}`);
      return this.reject(message, rules.STORE_FULL, key);
    }
    if (claim.kind === "held") return this.reply(message, keys.answer(claim, fingerprint, key, params.name, modern(params)));
    keys.log?.(`claimed: key=${repr(key)} tool=${params.name}`);
    const run: Run = { key, storeKey, fingerprint, owner: claim.owner, tx: keys.store.begin(), cancelled: false,
      due: performance.now() + keys.deadline * 1000, stop: () => void this.pastDeadline(message, run) };
    this.runs.set(message.id, run);
    keys.started(run);
    keys.context.run(run, () => this.onmessage?.(message, extra));
  }

  /** The run's outcome, recorded with the tool's writes in one commit: the response the client is sent. */
  async record(run: Run, message: JSONRPCResultResponse | JSONRPCErrorResponse): Promise<JSONRPCMessage> {
    const { keys } = this;
    keys.ended(run);
    let answer: JSONRPCMessage = message; // an error is sent as the SDK made it
    let kept: string;
    if ("result" in message) {
      // The acknowledgement goes on a copy: the result may be an object the tool hands out again. (Copied by
      // Object.assign, not spread: V8 makes and serialises these copies a quarter faster, on every keyed call.)
      const meta = Object.assign({}, message.result._meta, { [rules.ACKNOWLEDGEMENT]: rules.acknowledgement(run.key) });
      const result = Object.assign({}, message.result, { _meta: meta });
      answer = { jsonrpc: "2.0", id: message.id, result };
      // Kept as the Python library keeps an outcome, a result naming its type, so either language replays it.
      kept = JSON.stringify({ result: Object.assign({ resultType: "complete" }, result) });
    } else {
      kept = JSON.stringify({ error: message.error });
    }
    try {
      run.tx.complete(run.storeKey, run.fingerprint, kept);
      if (await run.tx.commit()) {
        keys.log?.(`recorded: key=${repr(run.key)}`);
        return answer;
      }
      // This instance lost its lease and a retry completed first: its writes were rolled back.
      keys.log?.(`lease lost: key=${repr(run.key)}, its writes rolled back`);
      return { jsonrpc: "2.0", id: message.id, error: rules.rejection(rules.IN_PROGRESS, run.key) };
    } catch (error) {
      await this.giveBack(run);
      keys.log?.(`store unavailable: key=${repr(run.key)}, nothing recorded (${String(error)})`);
      return { jsonrpc: "2.0", id: message.id, error: rules.rejection(rules.STORE_UNAVAILABLE, run.key) };
    }
  }

  /** A run past its deadline is ended: the SDK aborts its handler, its writes roll back, and that failure is
   * recorded, not given back: the tool may have had an effect outside the store, which a run anew could repeat. */
  async pastDeadline(message: JSONRPCRequest, run: Run): Promise<void> {
    if (this.runs.get(message.id) !== run) return;
    this.runs.delete(message.id);
    this.keys.ended(run);
    this.onmessage?.({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: message.id, reason: "deadline" } });
    await run.tx.rollback().catch(() => {});
    const failure = { error: DEADLINE_PASSED(this.keys.deadline) };
    const tx = this.keys.store.begin();
    let answer: { error: object } = failure;
    try {
      tx.complete(run.storeKey, run.fingerprint, JSON.stringify(failure));
      if (!(await tx.commit())) answer = { error: rules.rejection(rules.IN_PROGRESS, run.key) }; // taken over meanwhile
      this.keys.log?.(`deadline passed: key=${repr(run.key)}, its run was stopped after ${this.keys.deadline} s`);
    } catch (error) {
      await this.giveBack(run);
      this.keys.log?.(`store unavailable: key=${repr(run.key)}, nothing recorded (${String(error)})`);
      answer = { error: rules.rejection(rules.STORE_UNAVAILABLE, run.key) };
    }
    this.settled();
    if (!run.cancelled) await this.reply(message, answer);
  }

  /** Give the key back; if the store cannot even do that, its lease frees the key. */
  async giveBack(run: Run): Promise<void> {
    await this.keys.store.release(run.storeKey, run.owner)
      .catch((error: unknown) => this.keys.log?.(`not released: key=${repr(run.key)} is left to its lease (${String(error)})`));
  }

  reject(message: JSONRPCRequest, type: RejectionType, key: string): Promise<void> {
    return this.reply(message, { error: rules.rejection(type, key) });
  }

  /** Answer here; the SDK never sees the call. */
  reply(message: JSONRPCRequest, answer: { result: object } | { error: object }): Promise<void> {
    return this.inner.send({ jsonrpc: "2.0", id: message.id, ...answer } as JSONRPCMessage);
  }
}
