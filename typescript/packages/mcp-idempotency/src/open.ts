// Choosing a store by URL, with its windows and bounds checked at construction.

import { MemoryStore } from "./memory.js";
import { PostgresStore } from "./postgres.js";
import { SQLiteStore } from "./sqlite.js";
import * as rules from "./rules.js";
import type { Limits, Store } from "./stores.js";

export interface StoreOptions {
  /** memory, sqlite:PATH, or postgresql://USER@HOST/DATABASE. Default: memory. */
  store?: string;
  /** Seconds a completed record is replayed. */
  retention?: number;
  /** Seconds a holder that stopped renewing keeps its claim from a takeover. */
  lease?: number;
  /** Live records at most, running or completed. */
  maxRecords?: number;
  /** One principal's live records at most. */
  maxRecordsPerPrincipal?: number;
  /** The tools' own schema statements, run as the store opens (each must allow for what it made before). */
  tables?: readonly string[];
}

/** The limits the options give, each refused at once unless it is a number above zero. */
export function limitsOf(options: StoreOptions): Limits {
  const limits = {
    retention: options.retention ?? rules.RETENTION_SECONDS,
    lease: options.lease ?? rules.LEASE_SECONDS,
    maxRecords: options.maxRecords ?? rules.MAX_RECORDS,
    maxRecordsPerPrincipal: options.maxRecordsPerPrincipal ?? rules.MAX_RECORDS_PER_PRINCIPAL,
  };
  for (const [name, value] of Object.entries(limits)) {
    if (typeof value !== "number" || !(value > 0)) throw new RangeError(`${name} must be a number above zero, not ${String(value)}`);
  }
  return limits;
}

/** The store `options.store` names, opened. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const url = options.store ?? "memory";
  const limits = limitsOf(options);
  if (url === "memory") return new MemoryStore(limits, Date.now, options.tables);
  if (url.startsWith("sqlite:") && url.length > "sqlite:".length) return SQLiteStore.open(url.slice("sqlite:".length), limits, options.tables);
  if (url.startsWith("postgresql://") || url.startsWith("postgres://")) return PostgresStore.open(url, limits, options.tables);
  throw new Error(`unknown store ${JSON.stringify(url)}: use memory, sqlite:PATH or postgresql://USER@HOST/DATABASE`);
}
