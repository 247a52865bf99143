// The layer on the 2.x SDK's own HTTP entry, createMcpHandler, which makes a server and a transport for every
// request: attached to each server its factory makes, driven through the handler's web-standard face with the
// requests a client sends, in either revision (examples/shop-v2-http.ts serves the same over node:http).

import { McpServer, createMcpHandler } from "@modelcontextprotocol/server";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Idempotency, rules } from "../src/index.js";

const opened: Idempotency[] = [];
afterEach(async () => { await Promise.all(opened.splice(0).map((keys) => keys.close())); });

const REVISIONS = ["2026-07-28", "2025-11-25"] as const;
type Revision = (typeof REVISIONS)[number];

/** A handler whose servers each carry a slow counting tool, and the effects that tool had. */
async function served() {
  const keys = await Idempotency.open();
  opened.push(keys);
  const effects = { count: 0 };
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: "test", version: "1" });
    server.registerTool("slow", { inputSchema: z.object({ ms: z.number() }) }, async ({ ms }) => {
      await new Promise((resolve) => setTimeout(resolve, ms));
      effects.count += 1;
      return { content: [{ type: "text", text: `count ${effects.count}` }] };
    });
    return keys.attach(server);
  });
  return { handler, effects };
}

/** One tools/call as a client of `revision` posts it: 2026-07-28 carries its envelope in `_meta` and headers. */
function toolsCall(revision: Revision, id: number, ms: number, key: string, signal?: AbortSignal): Request {
  const envelope = revision === "2026-07-28"
    ? { "io.modelcontextprotocol/protocolVersion": revision, "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" },
      "io.modelcontextprotocol/clientCapabilities": {} }
    : {};
  const body = { jsonrpc: "2.0", id, method: "tools/call",
    params: { name: "slow", arguments: { ms }, _meta: { ...envelope, [rules.META_KEY]: key } } };
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream",
    "mcp-protocol-version": revision, ...revision === "2026-07-28" && { "mcp-method": "tools/call", "mcp-name": "slow" } };
  return new Request("http://127.0.0.1/mcp", { method: "POST", headers, body: JSON.stringify(body), signal });
}

/** The JSON-RPC answer in a response, sent as JSON or as the one message of an SSE stream. */
async function answer(response: Response): Promise<{ result?: { content: unknown; _meta?: Record<string, unknown> };
  error?: { data?: { type?: string } } }> {
  const text = await response.text();
  const data = text.split("\n").find((line) => line.startsWith("data: "));
  return JSON.parse(data === undefined ? text : data.slice("data: ".length)) as Awaited<ReturnType<typeof answer>>;
}

describe.each(REVISIONS)("createMcpHandler with the layer attached, %s", (revision) => {
  it("runs a keyed call once and replays it, acknowledged, to its retry on another request's server", async () => {
    const { handler, effects } = await served();
    const first = await answer(await handler.fetch(toolsCall(revision, 1, 0, "k")));
    const again = await answer(await handler.fetch(toolsCall(revision, 2, 0, "k")));
    expect(effects.count).toBe(1);
    expect(again.result?.content).toEqual(first.result?.content);
    expect(again.result?._meta?.[rules.ACKNOWLEDGEMENT]).toEqual({ idempotencyKey: "k" });
  });
  it("records a keyed run whose client went away mid-run: its retry is in progress, then the replay, one effect", async () => {
    const { handler, effects } = await served();
    const gone = new AbortController();
    const abandoned = handler.fetch(toolsCall(revision, 1, 300, "k", gone.signal)).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 50));
    gone.abort();
    expect((await answer(await handler.fetch(toolsCall(revision, 2, 300, "k")))).error?.data?.type).toBe(rules.IN_PROGRESS);
    await abandoned;
    await new Promise((resolve) => setTimeout(resolve, 400));
    const replay = await answer(await handler.fetch(toolsCall(revision, 3, 300, "k")));
    expect(replay.result?.content).toEqual([{ type: "text", text: "count 1" }]);
    expect(effects.count).toBe(1);
  });
});
