// The shop (examples/shop-tools.ts) on the SDK's 1.x line: @modelcontextprotocol/sdk's McpServer, over stdio.
//
//   node dist-examples/shop.js --store sqlite:PATH|postgresql://... [the options shop-tools.ts names]

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { keys, tools } from "./shop-tools.js";

const server = new McpServer({ name: "shop", version: "1.0" });
for (const tool of tools) {
  server.registerTool(tool.name, { description: tool.description, inputSchema: tool.inputSchema }, (args) => tool.run(args));
}
keys.advertise(server);
await server.connect(keys.wrap(new StdioServerTransport()));
