"""A lossy HTTP proxy on loopback: it forwards every request to the server and every answer back, but the
answer to the first tools/call of one tool, which it lets the server run and record, then loses.

    python tests/lossy_proxy.py UPSTREAM_PORT MODE TOOL

MODE says how the answer is lost: `reset` closes the client's connection before a byte of the answer (with
a TCP reset), `cut` sends the answer's headers and half its body and then closes, `hold` never answers and
keeps the connection open. It prints `listening on PORT` once ready, and `lost TOOL: MODE` each time it
loses an answer. One request per connection: the upstream connection is closed after each answer, and so
is the client's (the answer says `connection: close`).

MODE `flatten` loses nothing, but rewrites answers as a re-serialising gateway does (fastmcp's proxy,
mcp-proxy; JSON answers only): server/discover without the idempotency capability, and an idempotency
rejection of TOOL as an `isError` text result, "Error calling tool 'TOOL': MESSAGE", without code or data.
It prints `flattened TYPE` for each rejection it rewrote.
"""

import asyncio
import json
import socket
import struct
import sys

HEAD_END = b"\r\n\r\n"
EXTENSION_ID = "com.example.sep3182/idempotency"  # the capability a gateway does not forward
MODES = ("reset", "cut", "hold", "flatten")


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One HTTP request as it came, head and Content-Length body; None when the client closed first."""
    try:
        head = await reader.readuntil(HEAD_END)
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


def body_of(request: bytes) -> dict:
    """The request's JSON body, or {} when it has none."""
    body = request.partition(HEAD_END)[2]
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def closing(request: bytes) -> bytes:
    """The request with `Connection: close`, so the server ends its answer by closing."""
    head, _, body = request.partition(HEAD_END)
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + HEAD_END + body


async def answered(upstream_port: int, request: bytes) -> bytes:
    """The server's whole answer to `request`: the tool has run and its outcome is recorded."""
    reader, writer = await asyncio.open_connection("127.0.0.1", upstream_port)
    writer.write(closing(request))
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset: linger on, zero seconds."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def flattened(tool: str, message: dict) -> dict:
    """`message` as a re-serialising gateway passes it on: no idempotency capability, rejections as text."""
    result = message.get("result") or {}
    capabilities = result.get("capabilities") or {}
    (capabilities.get("extensions") or {}).pop(EXTENSION_ID, None)
    (capabilities.get("tools") or {}).pop("idempotency", None)
    error = message.get("error") or {}
    kind = (error.get("data") or {}).get("type", "")
    if not kind.startswith("idempotency_") and kind != "invalid_idempotency_key":
        return message
    print(f"flattened {kind}", flush=True)
    text = f"Error calling tool '{tool}': {error['message']}"
    return {
        "jsonrpc": "2.0",
        "id": message["id"],
        "result": {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"},
    }


def rewritten(answer: bytes, tool: str) -> bytes:
    """A JSON answer with its body passed through `flattened`, its Content-Length made to fit."""
    head, _, body = answer.partition(HEAD_END)
    if not body.startswith(b"{"):
        return answer
    message = json.loads(body)
    passed = flattened(tool, message)
    new_body = json.dumps(passed).encode()
    status, *lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"content-length:")]
    if "error" in message and "result" in passed:  # an error the server may have sent with a 4xx: a result now
        status = b"HTTP/1.1 200 OK"
    return b"\r\n".join([status, *lines, b"content-length: %d" % len(new_body)]) + HEAD_END + new_body


class LossyProxy:
    """Forwards everything, and loses the answer to the first tools/call of `tool` in `mode`."""

    def __init__(self, upstream_port: int, mode: str, tool: str):
        self.upstream_port, self.mode, self.tool = upstream_port, mode, tool
        self.lost = False

    def to_lose(self, request: bytes) -> bool:
        """Is this the first tools/call of the tool? (A retry, and everything else, goes through.)"""
        body = body_of(request)
        if self.lost or body.get("method") != "tools/call" or (body.get("params") or {}).get("name") != self.tool:
            return False
        self.lost = True
        return True

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: its request forwarded, its answer sent back or lost."""
        request = await read_request(reader)
        if request is None:
            writer.close()
            return
        losing = self.mode != "flatten" and self.to_lose(request)
        answer = await answered(self.upstream_port, request)
        if self.mode == "flatten":
            answer = rewritten(answer, self.tool)
        if not losing:
            writer.write(answer)
            await writer.drain()
            writer.close()
            return
        print(f"lost {self.tool}: {self.mode}", flush=True)
        if self.mode == "reset":
            reset(writer)
        elif self.mode == "cut":
            head, _, body = answer.partition(HEAD_END)
            writer.write(head + HEAD_END + body[: len(body) // 2])
            await writer.drain()
            writer.close()
        else:  # hold: the client gives up waiting, and closes
            await reader.read()
            writer.close()


async def main(upstream_port: int, mode: str, tool: str) -> None:
    """Listen on a free loopback port, and say which."""
    proxy = LossyProxy(upstream_port, mode, tool)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    upstream, how, name = sys.argv[1:]
    if how not in MODES:
        sys.exit(f"MODE must be one of {', '.join(MODES)}, not {how}")
    asyncio.run(main(int(upstream), how, name))
