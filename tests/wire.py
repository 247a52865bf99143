"""A server under test, spoken to in raw JSON-RPC: what any client in any language sees.

One suite, three targets, each a real server process:

    1x-stdio   server.py on mcp 1.x, over stdio, after the 2025 initialize handshake
    2x-stdio   the package's ledger server (mcp_idempotency_demo.ledger_server) on mcp 2.x, over stdio,
               on the 2026-07-28 revision
    2x-http    the same server on mcp 2.x, over stateless Streamable HTTP, 2026-07-28

`Wire` hides only what the transport and the revision require (framing, the
2026-07-28 `_meta` envelope and headers); the params a test sends are sent as
they are. The 2.x server runs in its own virtual environment, since the two SDKs
cannot share one: `.venv-2x` (or the interpreter $SEP3182_SDK2_PYTHON names).
"""

import contextlib
import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "server.py"
# The 2.x ledger server, as its environment runs it: a module of the installed package.
SDK2_SERVER = ["-m", "mcp_idempotency_demo.ledger_server"]
SDK2_PYTHON = Path(os.environ.get("SEP3182_SDK2_PYTHON", ROOT / ".venv-2x" / "bin" / "python"))
SDK2_SETUP = (
    "python3 tests/run.py, or: python3 -m venv .venv-2x && .venv-2x/bin/pip install -e 'idempotency[postgres,auth]'"
)

TARGETS = ["1x-stdio", "2x-stdio", "2x-http"]
# Where the quick set plays a rule the transport adds nothing to: one transport per SDK (conftest.py's quick_targets).
ONE_PER_SDK = ["1x-stdio", "2x-http"]

ABSENT = object()  # a params member that is left out, as opposed to sent as null
REPLY_TIMEOUT = 15  # seconds; generous, since CI machines are shared and slow
MODERN = "2026-07-28"
# What every 2026-07-28 request carries in params._meta, in place of a handshake.
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}

# The error.data.type values a client branches on (P5), spelled here as the wire
# carries them, not imported from the servers: the tests check the contract itself.
INVALID_KEY = "invalid_idempotency_key"
CONFLICT = "idempotency_key_conflict"
IN_PROGRESS = "idempotency_key_in_progress"
STORE_FULL = "idempotency_store_full"


def sse_messages(stream: str) -> list[dict]:
    """The JSON-RPC messages of an SSE response stream (--sse): notifications, then the response."""
    return [json.loads(line.removeprefix("data:")) for line in stream.splitlines() if line.startswith("data:")]


def sse_message(stream: str) -> str:
    """The response on an SSE response stream, as the text a JSON response would have carried."""
    [response] = [message for message in sse_messages(stream) if "id" in message]
    return json.dumps(response)


def sdk2_python() -> str:
    """The interpreter that has mcp 2.x, or a clear failure saying how to make one."""
    if not SDK2_PYTHON.exists():
        raise RuntimeError(f"no mcp 2.x environment at {SDK2_PYTHON}; make one: {SDK2_SETUP}")
    return str(SDK2_PYTHON)


PORTS_HANDED_OUT: set[int] = set()
PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and that no server of this process was given."""
    # Servers started together (crash victims, the bench's) each get a port before any binds it, and the kernel
    # may offer one free port twice: the second would fail to bind while the first answered (seen once in CI).
    with PORTS_LOCK:
        while True:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            if port not in PORTS_HANDED_OUT:
                PORTS_HANDED_OUT.add(port)
                return port


class Wire(ABC):
    """A server process, started and ready, spoken to in raw JSON-RPC messages."""

    def __init__(self, target: str, command: list[str]):
        self.target = target
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the server's stderr, open as long as it runs)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, encoding="utf-8"
        )
        self.replies: dict[object, str] = {}  # replies read while waiting for another
        self.next_id = 0
        self.numbering = threading.Lock()  # several threads may send on one Wire
        try:
            self.ready()
        except BaseException:  # a server that never became ready is stopped, not left running
            self.close()
            raise

    def ready(self) -> None:  # noqa: B027 (a target with no handshake has nothing to wait for)
        """Wait until the server answers, after whatever handshake this target needs."""

    # --- what each transport and revision says differently ------------------

    def frame(self, message: dict) -> dict:
        """The message as this target's revision wants it on the wire."""
        return message

    @abstractmethod
    def send_text(self, text: str, message) -> None:
        """Send one JSON-RPC message written as `text`; `message` is it parsed, or None if it is not JSON."""

    def envelope_text(self, members: str) -> str:
        """Params members as written, with this revision's envelope added as text (nothing is re-spelled)."""
        return members

    @abstractmethod
    def raw_reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> str:
        """The response for `request_id`, exactly as the server wrote it."""

    @abstractmethod
    def cancel(self, request_id) -> None:
        """Give up on a request the way the 2.x Python client does when it times out."""

    @abstractmethod
    def answered(self, request_id) -> bool:
        """Has the response to `request_id` arrived yet? (Does not wait.)"""

    # --- the same on every target -------------------------------------------

    def send(self, message: dict) -> None:
        """Write one JSON-RPC message."""
        self.send_text(json.dumps(message), message)

    def send_spelled(self, request_id, method: str, members: str) -> None:
        """Send a request whose params members are JSON text exactly as written: `1e0`, `-0`, member order."""
        text = (
            f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":{json.dumps(method)},'
            f'"params":{{{self.envelope_text(members)}}}}}'
        )
        self.send_text(text, json.loads(text))

    def notify(self, method: str, params: dict | None = None) -> None:
        """Send a notification."""
        self.send(self.frame({"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})}))

    def send_request(self, method: str, params=None) -> int:
        """Send a request without waiting; return its id."""
        with self.numbering:
            self.next_id += 1
            request_id = self.next_id
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(self.frame(message))
        return request_id

    def reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> dict:
        """The response for `request_id`, parsed."""
        return json.loads(self.raw_reply(request_id, timeout))

    def request(self, method: str, params=None) -> dict:
        """Send a request and wait for its response."""
        return self.reply(self.send_request(method, params))

    def send_call(self, name: str, arguments=ABSENT, key=ABSENT, **params) -> int:
        """Send a tools/call, the key (if any) beside `arguments`; return its id."""
        params = {"name": name, **params}
        if arguments is not ABSENT:
            params["arguments"] = arguments
        if key is not ABSENT:
            params["idempotencyKey"] = key
        return self.send_request("tools/call", params)

    def call(self, name: str, arguments=ABSENT, key=ABSENT, **params) -> dict:
        """A tools/call and its response."""
        return self.reply(self.send_call(name, arguments, key, **params))

    def charge(self, amount=100, key=ABSENT, tool: str = "charge_guarded") -> dict:
        """A charge and its response."""
        return self.call(tool, {"amount": amount}, key)

    def ledger(self) -> dict:
        """Ground truth from get_balance: {"balance": ..., "charges": ...}."""
        return json.loads(self.call("get_balance", {})["result"]["content"][0]["text"])

    def alive(self) -> bool:
        """Does the server still answer? (ping; 2026-07-28 has no ping, so server/discover there)"""
        if self.process.poll() is not None:
            return False
        return "result" in self.request("ping" if self.frame({}) == {} else "server/discover", {})

    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read()

    def wait_for_log(self, text: str, timeout: float = REPLY_TIMEOUT) -> None:
        """Wait until the server's stderr contains `text`, e.g. "claimed: key='k'" for a call in flight."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"server never logged {text!r}; its log:\n{self.log()}")
            time.sleep(0.01)

    @abstractmethod
    def close(self) -> int:
        """End the session the way a client of this transport does; return the server's exit code."""


class StdioWire(Wire):
    """A server subprocess spoken to in JSON-RPC lines on its stdin and stdout."""

    def __init__(self, target: str, command: list[str]):
        self.lines: queue.Queue[str] = queue.Queue()
        super().__init__(target, command)

    def ready(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)

    def send_line(self, line: str) -> None:
        """Write one line as it is, valid JSON-RPC or not."""
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def send_text(self, text: str, message) -> None:
        self.send_line(text)

    def raw_reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> str:
        while request_id not in self.replies:
            self._keep(self.lines.get(timeout=timeout))
        return self.replies.pop(request_id)

    def answered(self, request_id) -> bool:
        with contextlib.suppress(queue.Empty):
            while request_id not in self.replies:
                self._keep(self.lines.get_nowait())
        return request_id in self.replies

    def _keep(self, line: str) -> None:
        """File a line the server wrote: a response under its id; anything else is dropped."""
        message = json.loads(line)
        if "id" in message and "method" not in message:
            self.replies[message["id"]] = line.rstrip("\n")

    def cancel(self, request_id) -> None:
        # mcp 2.3.0, shared/jsonrpc_dispatcher.py, on TimeoutError: _cancel_outbound(request_id,
        # f"timed out after {timeout}s"), which notifies {"requestId": ..., "reason": ...}.
        self.notify("notifications/cancelled", {"requestId": request_id, "reason": "timed out after 0.5s"})

    def close(self) -> int:
        """Close stdin, as a client that goes away does."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class ModernStdioWire(StdioWire):
    """The 2.x server over stdio on 2026-07-28: server/discover, then the envelope on every request."""

    def ready(self) -> None:
        super().ready()
        self.capabilities = self.request("server/discover", {})["result"]["capabilities"]

    def frame(self, message: dict) -> dict:
        return with_envelope(message)

    def envelope_text(self, members: str) -> str:
        return with_envelope_text(members)


def with_envelope_text(members: str) -> str:
    """with_envelope for params written as text: the envelope's members go first into _meta."""
    envelope = json.dumps(ENVELOPE)[1:-1]
    if '"_meta":{' in members:
        return members.replace('"_meta":{', '"_meta":{' + envelope + ",", 1)
    return f'{members},"_meta":{{{envelope}}}'


def with_envelope(message: dict) -> dict:
    """A 2026-07-28 message: the envelope merged into params._meta, the test's own _meta kept."""
    params = message.get("params", {})
    if not isinstance(params, dict) or not isinstance(params.get("_meta", {}), dict):
        return message  # malformed on purpose: sent as it is
    return {**message, "params": {**params, "_meta": {**ENVELOPE, **params.get("_meta", {})}}}


class LegacyStdioWire(StdioWire):
    """The 1.x server over stdio, after the initialize handshake (2025-03-26, which every 1.x release speaks)."""

    def ready(self) -> None:
        super().ready()
        self.initialize_result = self.request(
            "initialize",
            {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "wire", "version": "1"},
            },
        )["result"]
        self.capabilities = self.initialize_result["capabilities"]
        self.notify("notifications/initialized")


class HttpWire(Wire):
    """The 2.x server over stateless Streamable HTTP: one POST per message, each on its own connection."""

    ready_seconds: float = REPLY_TIMEOUT  # how long the process may take to listen

    def __init__(self, target: str, command: list[str], port: int, revision: str = MODERN, headers: dict | None = None):
        self.port, self.revision = port, revision
        self.extra_headers = dict(headers or {})  # sent with every message, e.g. {"Authorization": "Bearer ..."}
        self.connections: dict[object, http.client.HTTPConnection] = {}
        self.answers: dict[object, queue.Queue] = {}
        super().__init__(target, command)

    def ready(self) -> None:
        self._wait_until_listening()
        self.capabilities = self.request("server/discover", {})["result"]["capabilities"]

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + self.ready_seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited before it listened:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nothing listens on port {self.port}:\n{self.log()}") from None
                time.sleep(0.05)

    def frame(self, message: dict) -> dict:
        return with_envelope(message) if self.revision == MODERN else message

    def envelope_text(self, members: str) -> str:
        return with_envelope_text(members) if self.revision == MODERN else members

    def headers(self, message) -> dict:
        """The headers the SDK's client sends with a message (2026-07-28 routes on them)."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self.revision,
        }
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            headers["Mcp-Method"] = message["method"]
            params = message.get("params")
            if message["method"] == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
                headers["Mcp-Name"] = params["name"]
            # SEP-2663: a task method is routed by the task it names.
            if message["method"].startswith("tasks/") and isinstance(params, dict) and "taskId" in params:
                headers["Mcp-Name"] = str(params["taskId"])
        return {**headers, **self.extra_headers}

    def post(self, body: bytes, headers: dict, key=None, path: str = "/mcp") -> tuple[int, dict, str]:
        """One POST to /mcp: status, headers and body. `key` names the connection for cancel()."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT)
        if key is not None:
            self.connections[key] = connection
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read().decode()
            if response.getheader("Content-Type", "").startswith("text/event-stream"):
                answer = sse_message(answer)
            return response.status, dict(response.getheaders()), answer
        finally:
            connection.close()

    def send_text(self, text: str, message) -> None:
        request_id = message.get("id") if isinstance(message, dict) else None
        answer = self.answers[request_id] = queue.Queue()
        headers = self.headers(message)  # now, as the caller's token is now

        def exchange():
            try:
                answer.put(self.post(text.encode(), headers, request_id)[2])
            except (OSError, http.client.HTTPException) as gone:  # closed by cancel(), or the server died
                answer.put(gone)

        threading.Thread(target=exchange, daemon=True).start()

    def raw_reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> str:
        if request_id in self.replies:
            return self.replies.pop(request_id)
        body = self.answers.pop(request_id).get(timeout=timeout)
        if isinstance(body, Exception):
            raise body
        return body

    def answered(self, request_id) -> bool:
        return request_id in self.replies or not self.answers[request_id].empty()

    def cancel(self, request_id) -> None:
        # Over HTTP the 2.x client sends no notification: it closes the request's connection.
        connection = self.connections.get(request_id)
        if connection is not None and connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> int:
        """Stop the server, as its operator does (SIGTERM)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start(
    target: str,
    *server_args: str,
    server: list[str] | None = None,
    store_dir: Path | None = None,
    headers: dict | None = None,
) -> Wire:
    """Start `target` with command-line options; the 2.x server gets a fresh SQLite store unless told otherwise.
    Over HTTP, `headers` go with every message (a bearer token)."""
    if target == "1x-stdio":
        return LegacyStdioWire(target, [sys.executable, *(server or [str(SERVER)]), "--verbose", *server_args])
    command = [sdk2_python(), *(server or SDK2_SERVER), "--verbose"]
    command += [] if "--placement" in server_args else ["--placement", "params"]  # the SEP's field, not the default
    if not any(arg.startswith("--store") for arg in server_args):
        folder = store_dir or Path(tempfile.mkdtemp(prefix="sep3182-"))
        folder.mkdir(parents=True, exist_ok=True)
        command += ["--store", f"sqlite:{folder / 'store.db'}"]
    if target == "2x-stdio":
        return ModernStdioWire(target, [*command, *server_args])
    port = free_port()
    return HttpWire(target, [*command, "--transport", "http", "--port", str(port), *server_args], port, headers=headers)


def start_together(target: str, *command_lines: tuple[str, ...]) -> list[Wire]:
    """One server per command line, all started at once. If any fails to start, every one
    that did start is stopped before the first failure is raised: none is left running."""
    with ThreadPoolExecutor(len(command_lines)) as pool:
        starting = [pool.submit(start, target, *server_args) for server_args in command_lines]
    wires = [future.result() for future in starting if future.exception() is None]
    failures = [future.exception() for future in starting if future.exception() is not None]
    if failures:
        for wire in wires:
            wire.close()
        raise failures[0]
    return wires


def error_type(response: dict) -> str | None:
    """The `error.data.type` of a JSON-RPC error response, None for a result."""
    error = response.get("error")
    return None if error is None else (error.get("data") or {}).get("type")


def text_of(response: dict) -> str:
    """The first text content of a tools/call result."""
    return response["result"]["content"][0]["text"]


def new_key() -> str:
    """A key no other row uses."""
    return str(uuid.uuid4())


def without_id(line: str, request_id) -> str:
    """A response line with its JSON-RPC envelope up to the id cut off: what a replay must repeat."""
    envelope = f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},'
    assert line.startswith(envelope), line
    return line[len(envelope) :]


def keyed_call_line(wire: Wire, name: str, arguments: dict, key: str) -> tuple[str, str]:
    """Send a keyed tools/call; return its raw response line, and that line without the id."""
    request_id = wire.send_call(name, arguments, key)
    line = wire.raw_reply(request_id)
    return line, without_id(line, request_id)
