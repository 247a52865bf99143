// P26 measured on the TypeScript SDKs: what survives of each placement, through stock API only.
//
//   node tests/interop/placement_ts.mjs PARAMS_URL META_URL ARGUMENT_URL    (the 2.x ledger server in each placement)
//
// One JSON object on stdout; tests/placement_table.py starts the servers and makes docs/placement.md's table.
// Clients (@modelcontextprotocol/client 2.4.0, @modelcontextprotocol/sdk 1.32.2): one keyed callTool each,
// the frame as the transport's fetch sent it, and the typed getServerCapabilities() and listTools() (the
// declared argument's only declaration is the mark on its property). Servers: sdk 1.32.2's McpServer (the one
// typescript/ holds) over InMemoryTransport, on the 2025 handshake; and @modelcontextprotocol/server 2.4.0's
// McpServer served on 2026-07-28 by createMcpHandler, its fetch handler called in process by the v2 client.
// For each: what reaches the transport (or the fetch handler) and the tool callback, and what capability (or
// marked property in tools/list) the server writes on the wire. For the v2 server also whether a tool's
// input-required return reaches the client and its continuation the tool (typescript/README.md, P25).

import { Client as ClientV2, StreamableHTTPClientTransport as HttpV2 } from "@modelcontextprotocol/client";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as HttpV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { McpServer as McpServerV2, createMcpHandler, inputRequired } from "@modelcontextprotocol/server";
import { readFileSync } from "node:fs";
import { z } from "zod";

const EXTENSION_ID = "com.example.sep3182/idempotency";
const META_KEY = "com.example.sep3182/idempotencyKey";
const SETTINGS = { maxKeyLength: 255, retentionSeconds: 86400 };
const KEY = "measured-key";
const MARK = "x-mcp-idempotency-key";
const ARGUMENT = "idempotency_key";
const [paramsUrl, metaUrl, argumentUrl, ...extra] = process.argv.slice(2);
if (argumentUrl === undefined || extra.length > 0) {
  console.error("usage: placement_ts.mjs PARAMS_URL META_URL ARGUMENT_URL");
  process.exit(2);
}

/** The installed version of one package, as node_modules holds it. */
function versionOf(name) {
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

// Each placement: where it puts the key in params, and where it declares it to a client. The declared argument
// advertises no capability: its declaration is the mark on the tool's property, in tools/list.
const PLACEMENTS = {
  params: {
    keyIn: (params) => params?.idempotencyKey,
    keyed: (params) => ({ ...params, idempotencyKey: KEY }),
    declaredIn: ({ capabilities }) => capabilities?.tools?.idempotency,
    // Stock API: both SDKs' ServerCapabilities type extensions (SEP-2133), not tools.idempotency (hence the casts).
    advertised: { tools: { idempotency: SETTINGS } },
  },
  meta: {
    keyIn: (params) => params?._meta?.[META_KEY],
    keyed: (params) => ({ ...params, _meta: { [META_KEY]: KEY } }),
    declaredIn: ({ capabilities }) => capabilities?.extensions?.[EXTENSION_ID],
    advertised: { extensions: { [EXTENSION_ID]: SETTINGS } },
  },
  argument: {
    keyIn: (params) => params?.arguments?.[ARGUMENT],
    keyed: (params) => ({ ...params, arguments: { ...params.arguments, [ARGUMENT]: KEY } }),
    declaredIn: ({ tools }) =>
      tools?.find((tool) => tool.name === "charge_guarded")?.inputSchema?.properties?.[ARGUMENT],
    advertised: {},
  },
};

/** Where `placement` puts the key, in params (or undefined). */
function keyIn(params, placement) {
  return PLACEMENTS[placement].keyIn(params);
}

/** What declares `placement` to a client, in an initialize (or server/discover) result's capabilities and a
 * tools/list result's tools: the capability, or the marked property (or undefined). */
function declarationIn(listed, placement) {
  return PLACEMENTS[placement].declaredIn(listed) ?? null;
}

/** The stock callTool params with the key in `placement`. */
function keyedParams(placement) {
  return PLACEMENTS[placement].keyed({ name: "charge_guarded", arguments: { amount: 100 } });
}

/** charge_guarded's input, as a zod shape: in the argument placement it declares the key (optional, its maxLength
 * the longest key), marked with zod's own metadata, which both SDKs' JSON Schema conversion writes into tools/list. */
function chargeShape(placement) {
  const marked = z.string().max(SETTINGS.maxKeyLength).optional().meta({ [MARK]: true });
  return placement === "argument" ? { amount: z.number(), [ARGUMENT]: marked } : { amount: z.number() };
}

/** A client SDK against the ledger server in `placement`: was the key sent, and does its typed view keep the
 * declaration (the capability, or the marked property in listTools())? */
async function measureClient(makeClient, makeTransport, placement, url) {
  const sent = [];
  const fetchAndKeep = async (input, init) => {
    if (typeof init?.body === "string") sent.push(JSON.parse(init.body));
    return fetch(input, init);
  };
  const client = makeClient();
  await client.connect(makeTransport(new URL(url), { fetch: fetchAndKeep }));
  await client.callTool(keyedParams(placement));
  const frame = sent.find((message) => message.method === "tools/call");
  const { tools } = await client.listTools();
  const declaration = declarationIn({ capabilities: client.getServerCapabilities(), tools }, placement);
  await client.close();
  return { sent: keyIn(frame?.params, placement) === KEY, capability_typed: declaration };
}

/** sdk 1.32.2's McpServer in `placement`: what the transport and the tool callback get, and what reaches a client. */
async function measureServer(placement) {
  const seen = {};
  const server = new McpServer({ name: "placement", version: "1.0.0" });
  server.registerTool("charge_guarded", { inputSchema: chargeShape(placement) }, async (args, extra) => {
    seen.handler = keyIn({ ...extra, arguments: args }, placement) === KEY;
    return { content: [{ type: "text", text: `charged ${args.amount}` }] };
  });
  server.server.registerCapabilities(/** @type {any} */ (PLACEMENTS[placement].advertised));
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const received = serverSide.onmessage; // the SDK's own handler, installed by connect
  serverSide.onmessage = (message, info) => {
    if (message.method === "tools/call") seen.transport = keyIn(message.params, placement) === KEY;
    received(message, info);
  };
  const written = {}; // the initialize result's capabilities and the tools/list result's tools
  const send = serverSide.send.bind(serverSide); // what the server writes, before any client schema reads it
  serverSide.send = async (message, options) => {
    if (message.result?.protocolVersion !== undefined) written.capabilities = message.result.capabilities;
    if (message.result?.tools !== undefined) written.tools = message.result.tools;
    return send(message, options);
  };
  const client = new ClientV1({ name: "placement", version: "1.0.0" });
  await client.connect(clientSide);
  await client.listTools();
  await client.callTool(keyedParams(placement));
  await client.close();
  return {
    transport: seen.transport === true,
    handler: seen.handler === true,
    capability_on_the_wire: declarationIn(written, placement),
  };
}

/** server 2.4.0's McpServer on 2026-07-28 in `placement`: what a wrapper of createMcpHandler's fetch and the
 * tool callback get, the capability server/discover (or the mark tools/list) writes, and a state-only
 * input-required round trip. */
async function measureServerV2(placement) {
  const seen = {};
  const factory = () => {
    const server = new McpServerV2({ name: "placement", version: "1.0.0" }, { capabilities: /** @type {any} */ (PLACEMENTS[placement].advertised) });
    server.registerTool("charge_guarded", { inputSchema: z.object(chargeShape(placement)) }, async (args, ctx) => {
      seen.handler = keyIn({ ...ctx.mcpReq, arguments: args }, placement) === KEY;
      return { content: [{ type: "text", text: "charged" }] };
    });
    server.registerTool("charge_confirmed", { inputSchema: z.object({ amount: z.number() }) }, async (args, ctx) => {
      const state = ctx.mcpReq.requestState();
      if (state === undefined) return inputRequired({ requestState: "asked" }); // P25's state-only form
      seen.continued = state === "asked";
      return { content: [{ type: "text", text: "charged" }] };
    });
    return server;
  };
  const handler = createMcpHandler(factory);
  const wire = []; // [request body, response body] as the fetch handler got and gave them
  const fetchInProcess = async (input, init) => {
    const response = await handler.fetch(new Request(input, init));
    wire.push([JSON.parse(init.body), await response.clone().json().catch(() => null)]);
    return response;
  };
  const client = new ClientV2({ name: "placement", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await client.connect(new HttpV2(new URL("http://in-process/mcp"), { fetch: fetchInProcess }));
  await client.listTools();
  await client.callTool(keyedParams(placement));
  await client.callTool({ name: "charge_confirmed", arguments: { amount: 100 } });
  await client.close();
  const answerTo = (method) => wire.filter(([request]) => request.method === method).map(([, response]) => response?.result);
  return {
    protocol: answerTo("server/discover")[0]?.supportedVersions ?? null,
    transport: keyIn(wire.find(([request]) => request.method === "tools/call")?.[0].params, placement) === KEY,
    handler: seen.handler === true,
    capability_on_the_wire: declarationIn(
      { capabilities: answerTo("server/discover")[0]?.capabilities, tools: answerTo("tools/list")[0]?.tools },
      placement,
    ),
    input_required: answerTo("tools/call").some((result) => result?.resultType === "input_required") && seen.continued === true,
  };
}

const v2 = [() => new ClientV2({ name: "placement", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } }), (url, options) => new HttpV2(url, options)];
const v1 = [() => new ClientV1({ name: "placement", version: "1.0.0" }), (url, options) => new HttpV1(url, options)];
const urls = { params: paramsUrl, meta: metaUrl, argument: argumentUrl };
const result = {};
for (const placement of Object.keys(PLACEMENTS)) {
  result[placement] = {
    client_v2: await measureClient(...v2, placement, urls[placement]),
    client_v1: await measureClient(...v1, placement, urls[placement]),
    server_v1: await measureServer(placement),
    server_v2: await measureServerV2(placement),
  };
}
console.log(
  JSON.stringify({
    sdks: {
      client_v2: `@modelcontextprotocol/client ${versionOf("@modelcontextprotocol/client")}`,
      server_v2: `@modelcontextprotocol/server ${versionOf("@modelcontextprotocol/server")}`,
      v1: `@modelcontextprotocol/sdk ${versionOf("@modelcontextprotocol/sdk")}`,
    },
    rows: result,
  }),
);
