#!/usr/bin/env node

/**
 * SEP-3182 Negative Test Server
 *
 * Speaks the stateless wire protocol (SEP-2575) and declares the
 * io.modelcontextprotocol/idempotency extension, but never reads the key:
 * every tools/call runs (any name but the count's charges). The idempotency
 * scenario should emit FAILURE for every check of a keyed call, and SUCCESS
 * for the capability, the unkeyed calls and the key's name elsewhere.
 */

import express from 'express';

const app = express();
app.use(express.json());

let charges = 0;

app.post('/mcp', async (req, res) => {
  const body = req.body || {};
  const id = body.id ?? null;
  const params = body.params || {};
  const ok = (result: Record<string, unknown>) =>
    res.json({
      jsonrpc: '2.0',
      id,
      result: { resultType: 'complete', ...result }
    });

  switch (body.method) {
    case 'server/discover':
      return ok({
        supportedVersions: ['2026-07-28'],
        capabilities: {
          tools: {},
          extensions: {
            'io.modelcontextprotocol/idempotency': {
              maxKeyLength: 255,
              retentionSeconds: 3600,
              deadlineSeconds: 60,
              leaseSeconds: 30
            }
          }
        },
        ttlMs: 0,
        cacheScope: 'private'
      });
    case 'tools/list':
      return ok({
        tools: [
          { name: 'test_idempotent_charge', inputSchema: { type: 'object' } },
          {
            name: 'test_idempotent_charge_count',
            inputSchema: { type: 'object' }
          }
        ],
        ttlMs: 0,
        cacheScope: 'private'
      });
    case 'tools/call':
      if (params.name === 'test_idempotent_charge_count') {
        return ok({
          content: [{ type: 'text', text: String(charges) }],
          structuredContent: { charges }
        });
      }
      // Deliberately ignore _meta["io.modelcontextprotocol/idempotencyKey"].
      await new Promise((resolve) =>
        setTimeout(resolve, (params.arguments?.seconds ?? 0) * 1000)
      );
      charges += 1;
      return ok({
        content: [{ type: 'text', text: `charged (charge #${charges})` }]
      });
    default:
      return res.status(404).json({
        jsonrpc: '2.0',
        id,
        error: { code: -32601, message: 'Method not found' }
      });
  }
});

const PORT = parseInt(process.env.PORT || '3010', 10);
app.listen(PORT, () => {
  console.log(
    `SEP-3182 negative test server running on http://localhost:${PORT}/mcp`
  );
});
