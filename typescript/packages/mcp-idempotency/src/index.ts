// mcp-idempotency: SEP-3182 request idempotency for servers on the official TypeScript MCP SDK, 1.x or 2.x.

export { Idempotency, Keyed, type IdempotencyOptions } from "./layer.js";
export { openStore, limitsOf, type StoreOptions } from "./open.js";
export { MemoryStore } from "./memory.js";
export { PostgresStore } from "./postgres.js";
export { SQLiteStore } from "./sqlite.js";
export { StoreUnavailable, type Claim, type Limits, type Row, type Store, type Transaction } from "./stores.js";
export * as rules from "./rules.js";
export { GaveUp, KeyedClient, KeyRefused, WindowPassed, discoverSettings, type CallToolResult, type ClientLike, type KeyedCallOptions,
  type Settings } from "./client.js";
export type { AuthInfo, JSONRPCMessage, MessageExtraInfo, ServerLike, Transport } from "./sdk.js";
