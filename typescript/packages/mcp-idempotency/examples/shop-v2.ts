// The shop (examples/shop-tools.ts) on the SDK's 2.x line: @modelcontextprotocol/server's McpServer, over stdio or
// Streamable HTTP.
//
//   node dist-examples/shop-v2.js --store sqlite:PATH|postgresql://... [--transport http --port N] [the options shop-tools.ts names]
//
// 2.x serves both from a factory of servers, and speaks 2026-07-28 (server/discover) or the 2025 revisions, as each
// client opens. Either way the layer is attached to each server the factory makes (`keys.attach`: the capability
// advertised, every transport it connects to wrapped): serveStdio reads stdio through a queue of its own before any
// server sees a message, and createMcpHandler makes a server and a transport of its own for every request.

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { McpServer, createMcpHandler } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { keys, tools, values } from "./shop-tools.js";

/** One server of the shop, its tools registered. */
function shop(): McpServer {
  const server = new McpServer({ name: "shop", version: "1.0" });
  for (const tool of tools) {
    server.registerTool(tool.name, { description: tool.description, inputSchema: tool.inputSchema }, (args) => tool.run(args));
  }
  return server;
}

/** node:http's request as the web Request the handler takes, aborted if its client goes away before the answer. */
async function asRequest(incoming: IncomingMessage, outgoing: ServerResponse): Promise<Request> {
  const chunks: Buffer[] = [];
  for await (const chunk of incoming) chunks.push(chunk as Buffer);
  const gone = new AbortController();
  outgoing.on("close", () => { if (!outgoing.writableFinished) gone.abort(); });
  const headers = new Headers();
  for (const [name, value] of Object.entries(incoming.headers)) {
    for (const one of [value ?? []].flat()) headers.append(name, one);
  }
  const body = incoming.method === "GET" || incoming.method === "HEAD" ? undefined : Buffer.concat(chunks);
  return new Request(`http://${incoming.headers.host ?? "localhost"}${incoming.url ?? "/"}`,
    { method: incoming.method, headers, body, signal: gone.signal });
}

if (values.transport !== "stdio" && values.transport !== "http") {
  console.error(`shop-v2.js: --transport is stdio or http, not ${values.transport}`);
  process.exit(2);
} else if (values.transport === "http") {
  const handler = createMcpHandler(() => keys.attach(shop()));
  createServer(async (incoming, outgoing) => {
    if (new URL(incoming.url ?? "/", "http://host").pathname !== "/mcp") {
      outgoing.writeHead(404).end();
      return;
    }
    const response = await handler.fetch(await asRequest(incoming, outgoing));
    outgoing.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body !== null) for await (const chunk of response.body) outgoing.write(chunk);
    outgoing.end();
  }).listen(Number(values.port), "127.0.0.1");
} else {
  // serveStdio queues what it reads and hands each message on to a server of its own making: the layer goes on each
  // server, after that queue, so that every tool runs in its own call's context, read together or not.
  serveStdio(() => keys.attach(shop()));
}
