"""SEP-3182 request idempotency for MCP servers and clients on the mcp 2.x SDK.

The public API, each in its module (this file imports none of them, so the stores
and the rules load without the SDK):

    mcp_idempotency.layer     Idempotency, the dispatch layer, an SDK Extension:
                              MCPServer(extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)
    mcp_idempotency.stores    open_store, Limits, and the unit of work a tool joins (tx.execute, fetchone,
                              fetchall); the command `mcp-idempotency-store` (stores/command.py)
    mcp_idempotency.client    the client half: call_tool, one key per logical call retried until answered,
                              discover_settings (discovery.py), honoured; each attempt's connection: link.py
    mcp_idempotency.rules     what a valid key is, when two calls are the same request, the rejections
    mcp_idempotency.probe     does this mcp build let the layer see the key?
    mcp_idempotency.keyed_call  what a 2.x client sends: KeyedCall, KeyedCallParams
    mcp_idempotency.auth      an OAuth 2.1 resource server's pieces, for records scoped by principal
    mcp_idempotency.resend    the client half's retry loop on any SDK, which the integrations run
    mcp_idempotency.integrations  the client half inside fastmcp, Pydantic AI, the OpenAI Agents SDK, LangChain
    mcp_idempotency.errors    IdempotencyError, the base of every exception the package raises to its users

Each module's __all__ holds its public names; the README's "Public API" section lists them all on one screen.
"""

__version__ = "0.5.0"
