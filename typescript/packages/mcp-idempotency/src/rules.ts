// The rules of SEP-3182 that need no MCP SDK, as the Python library's mcp_idempotency/rules.py
// states them: the same key check, fingerprint, rejections, capability, acknowledgement and
// downstream key, byte for byte, so that a Python and a TypeScript instance share one store.

import { createHash } from "node:crypto";
import { createBLAKE2b } from "hash-wasm";

/** A JSON value as JSON.parse gives it; a bigint stands for an integer a lossless parser kept exact. */
export type Json = null | boolean | number | bigint | string | Json[] | { [member: string]: Json };

/** The longest key taken unless the server is configured otherwise: room for a UUID with any prefix. */
export const MAX_KEY_LENGTH = 255;
export const RETENTION_SECONDS = 24 * 60 * 60;
export const MAX_RECORDS = 10_000;
export const MAX_RECORDS_PER_PRINCIPAL = 1_000;
export const LEASE_SECONDS = 30;
export const DEADLINE_SECONDS = 600;

export const EXTENSION_ID = "com.example.sep3182/idempotency";
export const META_KEY = "com.example.sep3182/idempotencyKey";
/** The member of a keyed result's _meta that says its key was honoured. */
export const ACKNOWLEDGEMENT = EXTENSION_ID;

/** Where the key is read and the capability written: the SEP's field, or the extension's _meta key. */
export type Placement = "params" | "meta";
export const DEFAULT_PLACEMENT: Placement = "meta";

// ----------------------------------------------------------------------------
// Valid keys
// ----------------------------------------------------------------------------

/** A key that is neither absent nor a string of 1 to the server's longest characters. */
export class InvalidKey extends Error {}

/** What a request carries where `placement` reads a key; a key anywhere else is no key. */
export function sentKey(params: Record<string, unknown>, placement: Placement): unknown {
  if (placement === "params") return params.idempotencyKey;
  const meta = params._meta;
  return typeof meta === "object" && meta !== null && !Array.isArray(meta)
    ? (meta as Record<string, unknown>)[META_KEY] : undefined;
}

/** The key sent, or null for none (absent or null); anything else is described, never echoed. */
export function checkedKey(value: unknown, longest: number): string | null {
  if (value === undefined || value === null) return null;
  // No more UTF-16 units than the longest has no more code points either: only a longer key is counted.
  if (typeof value === "string" && value.length >= 1 && value.length <= longest) return value;
  const length = typeof value === "string" ? [...value].length : -1; // code points, as Python counts
  if (typeof value === "string" && length >= 1 && length <= longest) return value;
  const got = typeof value === "string" ? `${length} characters`
    : Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : `a ${typeof value}`;
  throw new InvalidKey(`it must be a string of 1 to ${longest} characters, got ${got}`);
}

// ----------------------------------------------------------------------------
// The same request: the fingerprint
// ----------------------------------------------------------------------------

/** Order two strings by code point, as Python's sorted() does (JS's sort() orders UTF-16 units). */
export function byCodePoint(a: string, b: string): number {
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i += 1) {
    const difference = left[i]!.codePointAt(0)! - right[i]!.codePointAt(0)!;
    if (difference !== 0) return difference;
  }
  return left.length - right.length;
}

/** A number as pydantic's to_json writes it once rules.as_json_value made whole numbers integers. */
function numberText(value: number): string {
  if (!Number.isFinite(value)) return Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
  // 1.0 and 1e300 are ints there, -0 is 0; String spells a safe integer so too, without making a BigInt.
  if (Number.isSafeInteger(value)) return String(value);
  if (Number.isInteger(value)) return BigInt(value).toString();
  // Shortest round-trip digits on both sides; only the switch to an exponent differs: Rust's
  // ryu writes 1e-6 where JavaScript writes 0.000001, for magnitudes in [1e-6, 1e-5).
  const magnitude = Math.abs(value);
  return magnitude >= 1e-6 && magnitude < 1e-5 ? value.toExponential() : String(value);
}

/** One spelling of a JSON value, the bytes rules.fingerprint digests: members sorted, numbers by value. Written as
 * one string built in place, with no array of parts: it is on every keyed call's path. */
export function canonical(value: Json): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") return numberText(value);
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "bigint") return value.toString();
  let text = "";
  let comma = "";
  if (Array.isArray(value)) {
    for (const item of value) {
      text += comma + canonical(item);
      comma = ",";
    }
    return `[${text}]`;
  }
  for (const name of Object.keys(value).sort(byCodePoint)) {
    text += `${comma}${JSON.stringify(name)}:${canonical(value[name]!)}`;
    comma = ",";
  }
  return `{${text}}`;
}

// BLAKE2b-256 compiled to WebAssembly: a keyed call's fingerprint is on its path, and this digests a short request
// in a fifth of the time a hasher in JavaScript takes. Made once, as the module loads (the compiling is asynchronous).
const BLAKE2B_256 = await createBLAKE2b(256);

/**
 * A digest equal for two calls exactly when they name the same tool with equal arguments:
 * BLAKE2b-256 of [tool, arguments] spelled as the Python library spells it; _meta plays no part,
 * and absent arguments count as {}.
 */
export function fingerprint(tool: string, args: { [member: string]: Json } | null | undefined): Uint8Array {
  // The hasher takes the text and digests its UTF-8 bytes; init, update and digest run with no await between,
  // so no other fingerprint can interleave on the one instance.
  return BLAKE2B_256.init().update(canonical([tool, args ?? {}])).digest("binary");
}

/**
 * Does this value hold an integer-valued number beyond 2^53? JSON.parse has rounded any integer
 * written with more digits (9007199254740993 reads as 9007199254740992), so two different
 * requests could share a fingerprint: a keyed call holding one is refused, never compared rounded.
 */
export function holdsUnsafeInteger(value: Json): boolean {
  if (typeof value === "number") return Number.isInteger(value) && !Number.isSafeInteger(value);
  if (value === null || typeof value !== "object") return false;
  return (Array.isArray(value) ? value : Object.values(value)).some(holdsUnsafeInteger);
}

// ----------------------------------------------------------------------------
// Whose key it is: keys and principals as the store knows them
// ----------------------------------------------------------------------------

export type Principal = readonly string[];
export const ONE_TENANT: Principal = ["one tenant"];

/** Python's json.dumps of a list of strings: ", " between items, every non-ASCII character escaped. */
function pythonJsonList(items: readonly string[]): string {
  return `[${items.map(pythonJsonString).join(", ")}]`;
}

// Python's json.dumps leaves printable ASCII alone, but for " and \; JSON.stringify also leaves DEL and every
// character beyond ASCII, each of which Python writes as \uXXXX (a character beyond the BMP as its two halves).
const PRINTABLE_ASCII = /^[ !#-[\]-~]*$/;
const BEYOND_PRINTABLE_ASCII = /[\u007f-\uffff]/g;

/** One string as Python's json.dumps writes it; most keys and principals have nothing to escape. */
function pythonJsonString(item: string): string {
  if (PRINTABLE_ASCII.test(item)) return `"${item}"`;
  return JSON.stringify(item).replace(BEYOND_PRINTABLE_ASCII, (unit) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A principal as the store knows it, for its share of the store. */
export function principalName(principal: Principal): string {
  return pythonJsonList(principal);
}

/** A key as the store knows it, the principal's: no other principal's key can match it. */
export function scopedKey(principal: Principal, key: string): string {
  return pythonJsonList([...principal, key]);
}

/**
 * The key a running tool forwards to the API its effect lives in (its Idempotency-Key header):
 * the same for every retry of one call on every instance, in either language.
 */
export function downstreamKey(storedKey: string, print: Uint8Array): string {
  return createHash("sha256").update("mcp-idempotency downstream key\0").update(storedKey).update("\0")
    .update(print).digest("hex");
}

// ----------------------------------------------------------------------------
// The capability, the acknowledgement and the rejections on the wire
// ----------------------------------------------------------------------------

export interface Capability {
  maxKeyLength: number;
  retentionSeconds: number;
  deadlineSeconds: number;
  leaseSeconds: number;
}

/** The settings a client plans its retries by: the window rounded down, the deadline and lease up. */
export function capability(longest: number, retention: number, deadline: number, lease: number): Capability {
  return { maxKeyLength: longest, retentionSeconds: Math.floor(retention),
    deadlineSeconds: Math.ceil(deadline), leaseSeconds: Math.ceil(lease) };
}

/** The acknowledgement's value, the key that was honoured. */
export function acknowledgement(key: string): { idempotencyKey: string } {
  return { idempotencyKey: key };
}

export const ERROR_CODE = -32602;
export const INVALID_KEY = "invalid_idempotency_key";
export const CONFLICT = "idempotency_key_conflict";
export const IN_PROGRESS = "idempotency_key_in_progress";
export const STORE_FULL = "idempotency_store_full";
export const STORE_UNAVAILABLE = "idempotency_store_unavailable";
export type RejectionType = typeof INVALID_KEY | typeof CONFLICT | typeof IN_PROGRESS | typeof STORE_FULL
  | typeof STORE_UNAVAILABLE;

const MESSAGES: Record<RejectionType, string> = {
  [INVALID_KEY]: "invalid idempotencyKey",
  [CONFLICT]: "idempotencyKey was already used with a different tool or arguments",
  [IN_PROGRESS]: "a request with this idempotencyKey is still running; retry shortly",
  [STORE_FULL]: "the server holds as many idempotency records as it can; retry later",
  [STORE_UNAVAILABLE]: "the idempotency store failed before this request's outcome was recorded; retry shortly",
};

/** The rejections after which the same request, sent again later, may succeed. */
export const RETRYABLE: ReadonlySet<RejectionType> = new Set([IN_PROGRESS, STORE_FULL, STORE_UNAVAILABLE]);

/** What a client is told when something unexpected escapes a keyed call, kept like any outcome. */
export const INTERNAL_ERROR = { code: -32603, message: "Internal error: the tool call failed unexpectedly" };

export interface RejectionError {
  code: number;
  message: string;
  data: { type: RejectionType; retryable: boolean; idempotencyKey?: string };
}

/** The JSON-RPC error object for a rejection; an invalid key is not echoed. */
export function rejection(type: RejectionType, key?: string, detail?: string): RejectionError {
  const message = detail === undefined ? MESSAGES[type] : `${MESSAGES[type]}; ${detail}`;
  const data = { type, retryable: RETRYABLE.has(type), ...(key === undefined ? {} : { idempotencyKey: key }) };
  return { code: ERROR_CODE, message, data };
}
