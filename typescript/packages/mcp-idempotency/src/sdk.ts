// What the package needs of the official TypeScript SDK, written as shapes both of its lines have: 1.x
// (`@modelcontextprotocol/sdk`, McpServer) and 2.x (`@modelcontextprotocol/server` and `/client`, McpServer and
// Client again). Both are optional peers, and a server installs one of them: so the package imports neither, not
// even for a type (a declaration naming a package that is not installed compiles to `any`, or to an error), and
// runs no SDK code of its own; the SDK's own objects are handed in by the server and the client.
//
// The layer's ground is the JSON-RPC message and the Transport interface, which the two lines share member for
// member (2.x adds hasPerRequestStream and setSupportedProtocolVersions, forwarded by the layer when present).
// Callbacks are declared as methods so that each line's own, narrower, message types are accepted in both
// directions: the layer hands the SDK the very objects the transport gave it.

export type RequestId = string | number;

export interface JSONRPCRequest {
  jsonrpc: "2.0";
  id: RequestId;
  method: string;
  params?: object;
}

export interface JSONRPCNotification {
  jsonrpc: "2.0";
  method: string;
  params?: object;
}

export interface JSONRPCResultResponse {
  jsonrpc: "2.0";
  id: RequestId;
  result: { _meta?: object };
}

export interface JSONRPCErrorResponse {
  jsonrpc: "2.0";
  id?: RequestId;
  error: { code: number; message: string; data?: unknown };
}

export type JSONRPCMessage = JSONRPCRequest | JSONRPCNotification | JSONRPCResultResponse | JSONRPCErrorResponse;

/** Who sent a message, as a transport tells it (the same member on both lines). */
export interface AuthInfo {
  token: string;
  clientId: string;
  scopes: string[];
  expiresAt?: number;
  extra?: Record<string, unknown>;
}

/** What a transport tells of a message beside it: both lines' MessageExtraInfo have these, and more. */
export interface MessageExtraInfo {
  authInfo?: AuthInfo;
}

export interface TransportSendOptions {
  relatedRequestId?: RequestId;
}

/** The Transport interface of both lines: what an SDK server connects to, and what the layer wraps. */
export interface Transport {
  start(): Promise<void>;
  send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void>;
  close(): Promise<void>;
  onmessage?(message: JSONRPCMessage, extra?: MessageExtraInfo): void;
  onclose?(): void;
  onerror?(error: Error): void;
  sessionId?: string | undefined;
  setProtocolVersion?(version: string): void;
  /** 2.x: the revisions the server speaks, given to the transport as it connects (an HTTP transport checks headers by them). */
  setSupportedProtocolVersions?(versions: string[]): void;
  /** 2.x: one underlying request per message (Streamable HTTP on 2026-07-28). */
  readonly hasPerRequestStream?: boolean;
}

/** Where capabilities are registered, before connecting: the low-level Server of either line. */
export interface CapabilityRegistry {
  registerCapabilities(capabilities: object): void;
}

/** What a server of either line is connected to its transport by. */
export interface Connectable {
  connect(transport: Transport): Promise<void>;
}

/** An McpServer of either line (its low-level Server is `server`), or a low-level Server itself. */
export type ServerLike = { server: CapabilityRegistry } | CapabilityRegistry;

/** The one server the capability is registered on: an McpServer's own Server, or the Server given. */
export function registryOf(server: ServerLike): CapabilityRegistry {
  return "server" in server ? server.server : server;
}
