"""A STRICT server without the feature: raw JSON-RPC over stdio (standard library only) that refuses any
tools/call params member it does not know, idempotencyKey included, with -32602 Invalid params, as a
server whose params schema forbids additional properties would. The 2025-11-25 handshake only.
Its two tools are the ledger's (docs/backward-compatibility.md)."""

import json
import sys

KNOWN = {"name", "arguments", "_meta"}  # CallToolRequest.params in the 2025-11-25 schema
TOOLS = [
    {
        "name": "charge_guarded",
        "inputSchema": {
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
            "additionalProperties": False,
        },
    },
    {"name": "get_balance", "inputSchema": {"type": "object", "additionalProperties": False}},
]
charges = 0


def text(value: str) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def answer(method: str, params: dict) -> dict:
    """The result for one request, or {"error": ...}."""
    global charges
    if method == "initialize":
        return {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "strict", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        unknown = sorted(set(params) - KNOWN)
        if unknown:
            return {"error": {"code": -32602, "message": f"Invalid params: unknown member {', '.join(unknown)}"}}
        if params.get("name") == "charge_guarded":
            charges += 1
            return text(f"Charged {params['arguments']['amount']}. Charges: {charges}")
        if params.get("name") == "get_balance":
            return text(json.dumps({"charges": charges}))
        return {"error": {"code": -32602, "message": f"Unknown tool: {params.get('name')}"}}
    return {"error": {"code": -32601, "message": f"Method not found: {method}"}}


for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        print(
            json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}), flush=True
        )
        continue
    if not isinstance(message, dict) or "id" not in message:
        continue  # a notification: nothing to answer
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    outcome = answer(message.get("method"), params)
    reply = {"error": outcome["error"]} if "error" in outcome else {"result": outcome}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], **reply}), flush=True)
