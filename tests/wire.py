"""A server.py subprocess spoken to in raw JSON-RPC lines over stdio.

`Wire` is what any client in any language sees: JSON-RPC lines on a pipe, with no
SDK between. The tests that pin bytes, malformed input, cancellation or
concurrency use it, and so does the benchmark.
"""

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "server.py"

ABSENT = object()  # a params member that is left out, as opposed to sent as null
REPLY_TIMEOUT = 15  # seconds; generous, since CI machines are shared and slow

# The error.data.type values a client branches on (P5), spelled here as the wire
# carries them, not imported from server.py: the tests check the contract itself.
INVALID_KEY = "invalid_idempotency_key"
CONFLICT = "idempotency_key_conflict"
IN_PROGRESS = "idempotency_key_in_progress"
STORE_FULL = "idempotency_store_full"


class Wire:
    """A server.py subprocess, initialised, spoken to in raw JSON-RPC lines."""

    def __init__(self, *server_args: str, server: Path = SERVER):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, str(server), *server_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, encoding="utf-8",
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.replies: dict[object, str] = {}
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        self.initialize_result = self.request("initialize", {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "wire", "version": "1"},
        })["result"]
        self.notify("notifications/initialized")

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)

    def send_line(self, line: str) -> None:
        """Write one line as it is, valid JSON-RPC or not."""
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        """Write one JSON-RPC message."""
        self.send_line(json.dumps(message))

    def notify(self, method: str, params: dict | None = None) -> None:
        """Send a notification."""
        self.send({"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})})

    def send_request(self, method: str, params: dict | None = None) -> int:
        """Send a request without waiting; return its id."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.next_id

    def raw_reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> str:
        """The response line for `request_id`, exactly as the server wrote it."""
        while request_id not in self.replies:
            line = self.lines.get(timeout=timeout)
            message = json.loads(line)
            if "id" in message and "method" not in message:
                self.replies[message["id"]] = line.rstrip("\n")
        return self.replies.pop(request_id)

    def reply(self, request_id, timeout: float = REPLY_TIMEOUT) -> dict:
        """The response for `request_id`, parsed."""
        return json.loads(self.raw_reply(request_id, timeout))

    def request(self, method: str, params: dict | None = None) -> dict:
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
        """Does the server still answer a ping?"""
        if self.process.poll() is not None:
            return False
        return self.request("ping") == {"jsonrpc": "2.0", "id": self.next_id, "result": {}}

    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read()

    def wait_for_log(self, text: str, timeout: float = REPLY_TIMEOUT) -> None:
        """Wait until the server's stderr contains `text`, e.g. "executed: key='k'" for a call in flight."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"server never logged {text!r}; its log:\n{self.log()}")
            time.sleep(0.01)

    def close(self) -> int:
        """End the session the way a client does, by closing stdin; return the exit code."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def error_type(response: dict) -> str | None:
    """The `error.data.type` of a JSON-RPC error response, None for a result."""
    error = response.get("error")
    return None if error is None else (error.get("data") or {}).get("type")


def text_of(response: dict) -> str:
    """The first text content of a tools/call result."""
    return response["result"]["content"][0]["text"]
