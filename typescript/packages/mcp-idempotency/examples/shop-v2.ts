// The shop (examples/shop-tools.ts) on the SDK's 2.x line: @modelcontextprotocol/server's McpServer, over stdio.
//
//   node dist-examples/shop-v2.js --store sqlite:PATH|postgresql://... [the options shop-tools.ts names]
//
// 2.x serves stdio from a factory of servers (serveStdio), which speaks 2026-07-28 (server/discover) or the 2025
// handshake, as the client opens: each server the factory makes advertises the capability, and the transport it
// is given is wrapped by the layer, which reads every raw message of either revision before the SDK does.

import { McpServer } from "@modelcontextprotocol/server";
import { StdioServerTransport, serveStdio } from "@modelcontextprotocol/server/stdio";
import { keys, tools } from "./shop-tools.js";

serveStdio(() => {
  const server = new McpServer({ name: "shop", version: "1.0" });
  for (const tool of tools) {
    server.registerTool(tool.name, { description: tool.description, inputSchema: tool.inputSchema }, (args) => tool.run(args));
  }
  keys.advertise(server);
  return server;
}, { transport: keys.wrap(new StdioServerTransport()) });
