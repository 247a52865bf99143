/**
 * The Request Idempotency extension's types: the source of truth for schema.json beside it,
 * which `npm run generate` writes from this file (`npm run check:schema` compares the two).
 *
 * Extension identifier: io.modelcontextprotocol/idempotency (this repository's servers use
 * com.example.sep3182/idempotency until the name is granted). Only the extension's own shapes
 * are here; the core messages they ride in are the core schema's.
 */

/* Names */

/** The extension's identifier, in `capabilities.extensions` and in a result's `_meta`. */
export type IdempotencyExtensionId = "io.modelcontextprotocol/idempotency";

/** The request `_meta` member that carries the key. */
export type IdempotencyKeyMember = "io.modelcontextprotocol/idempotencyKey";

/**
 * A key: a string the client runtime mints once per logical call. Its length is counted in
 * Unicode code points and is at most the server's `maxKeyLength`.
 *
 * @minLength 1
 */
export type IdempotencyKey = string;

/* The declaration */

/**
 * The settings a server declares with the extension. Every member is optional: an empty object
 * declares support with none stated.
 */
export interface IdempotencySettings {
  /**
   * The longest key the server accepts, in Unicode code points; 255 when absent.
   *
   * @asType integer
   * @minimum 1
   */
  maxKeyLength?: number;
  /**
   * How long, in whole seconds, the server replays a completed call's outcome (rounded down).
   *
   * @asType integer
   * @minimum 1
   */
  retentionSeconds?: number;
  /**
   * How long, in whole seconds, a keyed run may take before the server ends it (rounded up).
   *
   * @asType integer
   * @minimum 1
   */
  deadlineSeconds?: number;
  /**
   * How long, in whole seconds, a claim whose holder stopped renewing it keeps its key (rounded up).
   *
   * @asType integer
   * @minimum 1
   */
  leaseSeconds?: number;
}

/** The server capabilities that declare the extension. */
export interface IdempotencyServerCapabilities {
  extensions: {
    "io.modelcontextprotocol/idempotency": IdempotencySettings;
    [extension: string]: unknown;
  };
  [capability: string]: unknown;
}

/* The key */

/** The `_meta` of a keyed `tools/call`: the key beside whatever else the request carries. */
export interface KeyedRequestMeta {
  "io.modelcontextprotocol/idempotencyKey": IdempotencyKey;
  [member: string]: unknown;
}

/** A keyed `tools/call` request. */
export interface KeyedCallToolRequest {
  jsonrpc: "2.0";
  id: string | number;
  method: "tools/call";
  params: {
    name: string;
    arguments?: { [argument: string]: unknown };
    _meta: KeyedRequestMeta;
    [member: string]: unknown;
  };
}

/* The acknowledgement */

/** The key a server honoured, under the extension's identifier in a result's `_meta`. */
export interface IdempotencyAcknowledgement {
  idempotencyKey: IdempotencyKey;
}

/** The `_meta` of a result the server recorded under a key: the same on the first answer and every replay. */
export interface AcknowledgedResultMeta {
  "io.modelcontextprotocol/idempotency": IdempotencyAcknowledgement;
  [member: string]: unknown;
}

/** The response to a keyed `tools/call` that the server honoured and answered with a result. */
export interface AcknowledgedCallToolResponse {
  jsonrpc: "2.0";
  id: string | number;
  result: {
    _meta: AcknowledgedResultMeta;
    [member: string]: unknown;
  };
}

/* The rejections */

/** A key's record is of a request that is not equivalent. */
export interface KeyConflictData {
  type: "idempotency_key_conflict";
  idempotencyKey: IdempotencyKey;
  retryable: false;
}

/** An equivalent request with the key is still running. */
export interface KeyInProgressData {
  type: "idempotency_key_in_progress";
  idempotencyKey: IdempotencyKey;
  retryable: true;
}

/** The value is not a valid key; the value is not echoed. */
export interface InvalidKeyData {
  type: "invalid_idempotency_key";
  retryable: false;
}

/** The server holds as many records as it allows, or the principal its share. */
export interface StoreFullData {
  type: "idempotency_store_full";
  idempotencyKey: IdempotencyKey;
  retryable: true;
}

/** The server could not read or write its records. */
export interface StoreUnavailableData {
  type: "idempotency_store_unavailable";
  idempotencyKey: IdempotencyKey;
  retryable: true;
}

/** The `data` of every rejection the extension defines. */
export type IdempotencyErrorData =
  | KeyConflictData
  | KeyInProgressData
  | InvalidKeyData
  | StoreFullData
  | StoreUnavailableData;

/** A rejection: a JSON-RPC error with code -32602 (Invalid params). */
export interface IdempotencyError {
  code: -32602;
  message: string;
  data: IdempotencyErrorData;
}

/** The response that carries a rejection. */
export interface IdempotencyErrorResponse {
  jsonrpc: "2.0";
  id: string | number;
  error: IdempotencyError;
}
