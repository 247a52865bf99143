#!/usr/bin/env python3
"""A SEP-3182 conformance kit: point it at any MCP server and it checks idempotencyKey on tools/call.

    python3 conformance/kit.py --command "node server.js"          # stdio: the kit starts the server
    python3 conformance/kit.py --url http://127.0.0.1:8000/mcp     # Streamable HTTP: already running

It needs nothing but Python 3.10's standard library. It speaks raw JSON-RPC, so
what it sees is what any client sees: the 2026-07-28 revision (server/discover
and the per-request envelope) where the server has it, else the 2025-11-25
initialize handshake (--revision picks one). README.md beside this file gives the
fixture contract (the tools a server exposes for the kit), the options, and the
exit rules; sep-3182.yaml maps every requirement of the SEP to these checks.

Each check's id starts with sep-3182-; its severity says what a failure means:
MUST (a MUST or MUST NOT of the SEP, or what it defines on the wire) fails as
FAILURE; SHOULD (a SHOULD of the SEP) and POSITION (this project's reading where
the SEP is silent, tests/CONFORMANCE.md's P rows) fail as WARNING.

Exit status: 0, nothing failed and every check chosen ran in full; 1, a failure
(or a stale baseline); 2, a wrong command line, or a fixture that does not work
(the server not opened, a tool missing, a charge that fails or is not counted:
no rule is then failed); 3, nothing failed but a check was NOT TESTED (SKIPPED,
not baselined), so the run claims no full conformance.
A check whose rule binds no server like this one (tasks, where it declares none)
is SKIPPED as not applicable: neither tested nor owed, it leaves the status as is.
"""

import argparse
import contextlib
import datetime
import http.client
import json
import queue
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "sep-3182-kit", "version": "1"},
}
SPEC_URL = "https://github.com/modelcontextprotocol/modelcontextprotocol/pull/3182"
# P26 (--placement meta): the key as an extension (SEP-2133) instead of the SEP's params field, its
# request _meta key and capabilities.extensions id named by the 2026-07-28 _meta rules; every check is
# the same, the key and the capability are only looked for elsewhere.
EXTENSION_ID = "com.example.sep3182/idempotency"
META_KEY = "com.example.sep3182/idempotencyKey"
# P24: the tasks extension of 2026-07-28 (SEP-2663). A server declares it in capabilities.extensions; a client
# declares it in each request's own client capabilities, and only such a request may be answered with a task.
TASKS = "io.modelcontextprotocol/tasks"
DECLARES_TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}
TASK_FINISHED = ("completed", "failed", "cancelled")

# The error.data.type values of the SEP's examples (S1a, S3b) and of this project's positions (P2, P9).
INVALID_KEY = "invalid_idempotency_key"
CONFLICT = "idempotency_key_conflict"
IN_PROGRESS = "idempotency_key_in_progress"
STORE_FULL = "idempotency_store_full"
STORE_UNAVAILABLE = "idempotency_store_unavailable"
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# The wire's own answer: error.data.retryable says whether the very same request may be sent again.
RETRYABLE = {IN_PROGRESS: True, STORE_FULL: True, STORE_UNAVAILABLE: True, CONFLICT: False, INVALID_KEY: False}


class Failed(Exception):
    """The server broke the rule the check tests."""


class Skipped(Exception):
    """The check could not run against this server; the reason says what it needs."""


# The credentials the authorisation checks need beyond --bearer: option, what it is, what it tests.
CREDENTIALS = {
    "second_bearer": ("--second-bearer", "a second principal's token", "keys across principals (K2)"),
    "narrowed_bearer": (
        "--narrowed-bearer",
        "the first principal's token without the charge tool's scope",
        "a replay's authorisation (K3)",
    ),
}


class NotRun(Skipped):
    """An authorisation check without the credential it needs: HTTP, and one of CREDENTIALS."""

    def __init__(self, credential: str):
        option, what, _ = CREDENTIALS[credential]
        super().__init__(f"not run: needs an HTTP server behind authorisation and {what} ({option})")
        self.credential = credential


class NotApplicable(Skipped):
    """The rule binds no server like this one (it offers no tasks; no tool that asks for input was named): SKIPPED
    with details.applicable false. Unlike NOT TESTED, it does not make the run exit 3."""


class Inconclusive(Exception):
    """The check ran but could not tell (a slow server that was not slow enough): a WARNING."""


class ShouldUnmet(Exception):
    """A MUST check's SHOULD half fell short (a setting not advertised): a WARNING, never a FAILURE."""


class PartlyRun(Skipped):
    """Every row that ran passed, but some could not run: the check is NOT TESTED, never SUCCESS.

    `untested` names what was not tested and `option` what the kit needs to test it (the summary line says both)."""

    def __init__(self, untested: str, option: str, ran: str):
        super().__init__(f"NOT TESTED: {untested} ({option}); {ran}")
        self.untested, self.option = untested, option


def expect(condition: bool, reason: str) -> None:
    """Fail the check with `reason` unless `condition` holds."""
    if not condition:
        raise Failed(reason)


# ----------------------------------------------------------------------------
# 1. Speaking to a server: raw JSON-RPC over stdio or Streamable HTTP
# ----------------------------------------------------------------------------


class Connection:
    """One server, spoken to in raw JSON-RPC; subclasses carry the bytes."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.revision = MODERN
        self.placement = "params"  # P26: where every request's idempotencyKey goes (connect() sets it)
        self.tool_arguments: dict = {}  # --tool-arguments: merged into every tools/call (connect() sets them)
        self.next_id = 0
        self.numbering = threading.Lock()

    def frame(self, message: dict, placed: bool = True) -> dict:
        """The message as the revision wants it: on 2026-07-28 the envelope goes into params._meta; in the
        meta placement (P26) an idempotencyKey member goes there too, unless `placed` is False."""
        params = message.get("params", {})
        if placed and self.placement == "meta" and isinstance(params, dict) and "idempotencyKey" in params:
            params = {name: value for name, value in params.items() if name != "idempotencyKey"}
            if isinstance(params.get("_meta", {}), dict):
                params["_meta"] = {**params.get("_meta", {}), META_KEY: message["params"]["idempotencyKey"]}
            message = {**message, "params": params}
        if self.revision != MODERN or not isinstance(params, dict) or not isinstance(params.get("_meta", {}), dict):
            return message
        return {**message, "params": {**params, "_meta": {**ENVELOPE, **params.get("_meta", {})}}}

    def spelled(self, request_id, method: str, members: str) -> str:
        """A request whose params members are JSON text as written (`1e0`, `-0`, member order kept)."""
        if self.placement == "meta":
            members = key_in_meta(members)
        if self.revision == MODERN:
            envelope = json.dumps(ENVELOPE)[1:-1]
            members = (
                members.replace('"_meta":{', '"_meta":{' + envelope + ",", 1)
                if '"_meta":{' in members
                else f'{members},"_meta":{{{envelope}}}'
            )
        return f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":{json.dumps(method)},"params":{{{members}}}}}'

    def new_id(self) -> int:
        with self.numbering:
            self.next_id += 1
            return self.next_id

    def send_request(self, method: str, params=None, placed: bool = True) -> int:
        """Send a request without waiting; its id. `placed=False` leaves an idempotencyKey where it is (P26)."""
        request_id = self.new_id()
        if method == "tools/call":
            params = with_arguments(params, self.tool_arguments)
        message = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            **({} if params is None else {"params": params}),
        }
        self.send_text(json.dumps(self.frame(message, placed)), request_id)
        return request_id

    def send_spelled(self, method: str, members: str) -> int:
        request_id = self.new_id()
        if method == "tools/call":
            members = spelled_with_arguments(members, self.tool_arguments)
        self.send_text(self.spelled(request_id, method, members), request_id)
        return request_id

    def notify(self, method: str, params: dict) -> None:
        self.send_text(json.dumps(self.frame({"jsonrpc": "2.0", "method": method, "params": params})), None)

    def request(self, method: str, params=None) -> dict:
        return self.reply(self.send_request(method, params))

    def reply(self, request_id, timeout: float | None = None) -> dict:
        return json.loads(self.raw_reply(request_id, timeout))

    def alive(self) -> bool:
        """Does the server still answer a request? (ping on the handshake; server/discover on 2026-07-28)"""
        try:
            return "result" in self.request("server/discover" if self.revision == MODERN else "ping", {})
        except (OSError, TimeoutError, queue.Empty, ValueError, http.client.HTTPException):
            return False

    # --- what each transport does -------------------------------------------

    def send_text(self, text: str, request_id) -> None:
        raise NotImplementedError

    def raw_reply(self, request_id, timeout: float | None = None) -> str:
        raise NotImplementedError

    def answered(self, request_id) -> bool:
        raise NotImplementedError

    def cancel(self, request_id) -> str:
        """Give up on a request, as a client does; how it was done (the transport, and over HTTP the response mode)."""
        raise NotImplementedError

    def wait_until_listening(self) -> None:
        """Before the first request: nothing to wait for over stdio, whose first answer waits --timeout seconds."""

    def close(self) -> None:
        raise NotImplementedError


def members_of(members: str) -> list[tuple[str, str, str]]:
    """Params members written as JSON text: (name, the member as written, its value as written), in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := len(members) - len(members[at:].lstrip(" \t\r\n,"))) < len(members):
        name, end = decoder.raw_decode(members, at)
        value_at = len(members) - len(members[end:].lstrip(" \t\r\n:"))
        _, value_end = decoder.raw_decode(members, value_at)
        found.append((name, members[at:value_end], members[value_at:value_end]))
        at = value_end
    return found


def with_arguments(params: dict, fixed: dict) -> dict:
    """A tools/call's params with --tool-arguments merged into its arguments; the kit's own members win a clash.
    A call sent with no arguments member (equivalence-absent-arguments) is left without one, as it was meant."""
    if not fixed or not isinstance(params, dict) or not isinstance(params.get("arguments"), dict):
        return params
    return {**params, "arguments": {**fixed, **params["arguments"]}}


def spelled_with_arguments(members: str, fixed: dict) -> str:
    """with_arguments for params written as text: the fixed members go first, each one the kit spells left out."""
    try:
        found = members_of(members)
        spelled = [value.strip() for name, _, value in found if name == "arguments"]
        if not fixed or len(spelled) != 1 or not spelled[0].startswith("{") or not spelled[0][1:-1].strip():
            return members  # none to merge into, or a spelled `{}`: equivalence-absent-arguments compares it as written
        named = {name for name, _, _ in members_of(spelled[0][1:-1])}
    except ValueError:
        return members  # not members the kit can read: sent as written
    added = [f"{json.dumps(name)}:{json.dumps(value)}" for name, value in fixed.items() if name not in named]
    inner = spelled[0][1:-1].strip()
    arguments = "{" + ",".join([*added, *([inner] if inner else [])]) + "}"
    return ",".join(f'"arguments":{arguments}' if name == "arguments" else member for name, member, _ in found)


def key_in_meta(members: str) -> str:
    """P26 for params written as text: a top-level idempotencyKey member moves, as written, into _meta."""
    try:
        found = members_of(members)
    except ValueError:
        return members  # not members the kit can read: sent as written
    keys = [value for name, _, value in found if name == "idempotencyKey"]
    if not keys:
        return members
    meta = ([value for name, _, value in found if name == "_meta"] or ["{}"])[-1].strip()
    if not meta.startswith("{"):
        return members  # a _meta that is no object, on purpose: sent as written
    inner = meta[1:-1].strip()
    rest = [member for name, member, _ in found if name not in ("idempotencyKey", "_meta")]  # duplicates kept
    return ",".join([*rest, f'"_meta":{{{json.dumps(META_KEY)}:{keys[-1]}{"," + inner if inner else ""}}}'])


class Stdio(Connection):
    """A server the kit starts, spoken to in JSON-RPC lines on its stdin and stdout."""

    def __init__(self, command: str, timeout: float):
        super().__init__(timeout)
        self.command = command
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the server's stderr, open as long as it runs)
        self.process = subprocess.Popen(
            shlex.split(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
        )
        self.lines: queue.Queue = queue.Queue()
        self.replies: dict = {}
        self.writing = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the server closed stdout

    def send_text(self, text: str, request_id) -> None:
        with self.writing:
            self.process.stdin.write(text + "\n")
            self.process.stdin.flush()

    def _file(self, line) -> None:
        """Keep a response under its id; notifications and requests from the server are not answers."""
        if line is None:
            raise ConnectionError(f"the server exited; its stderr ends: {self.log()[-300:]!r}")
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict) and "id" in message and "method" not in message:
                self.replies[message["id"]] = line.rstrip("\n")

    def raw_reply(self, request_id, timeout: float | None = None) -> str:
        deadline = time.monotonic() + (timeout or self.timeout)
        while request_id not in self.replies:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to request {request_id} in {timeout or self.timeout:g} s")
            with contextlib.suppress(queue.Empty):
                self._file(self.lines.get(timeout=remaining))
        return self.replies.pop(request_id)

    def answered(self, request_id) -> bool:
        with contextlib.suppress(queue.Empty):
            while request_id not in self.replies:
                self._file(self.lines.get_nowait())
        return request_id in self.replies

    def cancel(self, request_id) -> str:
        """As the 2.x Python client does on a timeout."""
        self.notify("notifications/cancelled", {"requestId": request_id, "reason": "timed out"})
        return "stdio: notifications/cancelled"

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Http(Connection):
    """A running server's Streamable HTTP endpoint: one POST per message, each on its own connection."""

    def __init__(self, url: str, timeout: float, headers: dict):
        super().__init__(timeout)
        self.url = urllib.parse.urlsplit(url)
        self.extra_headers = headers
        self.session_id = None  # a 2025 server may hand one out at initialize
        self.answers: dict = {}
        self.sockets: dict = {}
        self.content_types: dict = {}  # request id -> its response's Content-Type, once the response has begun

    def headers(self, text: str) -> dict:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self.revision,
            **self.extra_headers,
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            message = json.loads(text)
            if self.revision == MODERN and isinstance(message.get("method"), str):  # 2026-07-28 routes on these
                headers["Mcp-Method"] = message["method"]
                if message["method"] == "tools/call" and isinstance(message["params"].get("name"), str):
                    headers["Mcp-Name"] = message["params"]["name"]
                if message["method"].startswith("tasks/") and isinstance(message["params"].get("taskId"), str):
                    headers["Mcp-Name"] = message["params"]["taskId"]  # SEP-2663: the task a request is about
        return headers

    def post(self, text: str, request_id=None) -> tuple[int, dict, str]:
        """One POST: status, headers (lower-case names) and the JSON-RPC answer for `request_id`, if any."""
        kind = http.client.HTTPSConnection if self.url.scheme == "https" else http.client.HTTPConnection
        connection = kind(self.url.hostname, self.url.port, timeout=self.timeout)
        if request_id is not None:
            self.sockets[request_id] = connection
        try:
            connection.request("POST", self.url.path or "/", body=text.encode(), headers=self.headers(text))
            response = connection.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            self.content_types[request_id] = headers.get("content-type", "")
            body = response.read().decode()
        finally:
            connection.close()
        if headers.get("content-type", "").startswith("text/event-stream"):
            body = answer_in_stream(body, request_id)
        return response.status, headers, body

    def send_text(self, text: str, request_id) -> None:
        answer = self.answers[request_id] = queue.Queue()

        def exchange():
            try:
                status, headers, body = self.post(text, request_id)
                if headers.get("mcp-session-id"):
                    self.session_id = headers["mcp-session-id"]
                answer.put(body if body.strip() else json.dumps({"httpStatus": status}))
            except (OSError, http.client.HTTPException) as gone:  # closed by cancel(), or the server went away
                answer.put(gone)

        threading.Thread(target=exchange, daemon=True).start()

    def raw_reply(self, request_id, timeout: float | None = None) -> str:
        try:
            body = self.answers[request_id].get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer to request {request_id}") from None
        del self.answers[request_id]
        if isinstance(body, Exception):
            raise body
        return body

    def answered(self, request_id) -> bool:
        return not self.answers[request_id].empty()

    def cancel(self, request_id) -> str:
        """Over HTTP a client that gives up closes the request's connection: on an SSE response, its stream
        (2026-07-28 makes that a cancel); on a JSON one, before any of the answer has come."""
        connection = self.sockets.get(request_id)
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        begun = self.content_types.get(request_id)
        if begun is None:
            return "HTTP: closed the connection before the response began (no headers: a JSON answer comes whole)"
        return f"HTTP: closed the response stream mid-call ({begun.split(';')[0]})"

    def wait_until_listening(self) -> None:
        """A server started beside the kit may not listen yet: wait up to --timeout seconds for it to accept a
        connection, then say that nothing did."""
        address = (self.url.hostname, self.url.port or (443 if self.url.scheme == "https" else 80))
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                socket.create_connection(address, timeout=1).close()
                return
            except OSError as refused:
                if time.monotonic() >= deadline:
                    raise ConnectionError(
                        f"nothing accepted a connection at {urllib.parse.urlunsplit(self.url)} in {self.timeout:g} s "
                        f"(--timeout): {refused}"
                    ) from None
                time.sleep(0.2)

    def close(self) -> None:
        pass  # the kit did not start it


def answer_in_stream(body: str, request_id) -> str:
    """The JSON-RPC response in a text/event-stream body (a 2025 server may answer so, a 2026 one too). SSE lines
    end in CRLF, LF or CR: with CRLF, events that come before the answer (progress) would otherwise hide it."""
    for event in body.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.splitlines() if line.startswith("data:"))
        with contextlib.suppress(ValueError):
            message = json.loads(data)
            if isinstance(message, dict) and "method" not in message and message.get("id") in (request_id, None):
                return data
    return ""


def opened(connection: Connection, revision: str) -> dict:
    """Discover the server (2026-07-28) or shake hands (2025-11-25); its capabilities, and which was used."""
    connection.wait_until_listening()
    if revision in ("auto", MODERN):
        connection.revision = MODERN
        with contextlib.suppress(TimeoutError, ValueError, OSError, http.client.HTTPException):
            answer = connection.request("server/discover", {})  # a server that lacks it answers with an error
            if "result" in answer:
                return {"revision": MODERN, "capabilities": answer["result"].get("capabilities", {})}
        if revision == MODERN:
            raise ConnectionError("the server did not answer server/discover on 2026-07-28")
    connection.revision = HANDSHAKE
    answer = connection.request(
        "initialize",
        {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "sep-3182-kit", "version": "1"}},
    )
    if "result" not in answer:
        raise ConnectionError(f"initialize failed: {answer}")
    connection.revision = answer["result"].get("protocolVersion", HANDSHAKE)
    connection.notify("notifications/initialized", {})
    return {"revision": connection.revision, "capabilities": answer["result"].get("capabilities", {})}


# ----------------------------------------------------------------------------
# 2. The fixture contract: a counted side effect, a read of the count, a slow call
# ----------------------------------------------------------------------------


ARGUMENT_MARK = "x-mcp-idempotency-key"  # a tool's inputSchema property that carries the key (P26)


def advertised_placement(capabilities: dict, tools: list) -> str:
    """P26: where the server says it reads the key: the extension's capability, the field's, or marked arguments.
    The kit checks the first two; a server that only marks arguments is refused, since every check would send
    its key elsewhere; one that declares nothing is checked as the field, and fails its capability check."""
    if isinstance((capabilities.get("extensions") or {}).get(EXTENSION_ID), dict):
        return "meta"
    marked = any(
        isinstance(schema, dict) and schema.get(ARGUMENT_MARK)
        for tool in tools
        for schema in ((tool.get("inputSchema") or {}).get("properties") or {}).values()
    )
    if marked and not isinstance((capabilities.get("tools") or {}).get("idempotency"), dict):
        raise ConnectionError(
            f"the server reads its key from tool arguments marked {ARGUMENT_MARK}: this kit checks the field "
            "(--placement params) and the extension's _meta key (--placement meta) only"
        )
    return "params"


class Server:
    """A server under test, opened, with the fixture contract's tools as the options name them."""

    def __init__(self, connection: Connection, options):
        self.connection = connection
        self.options = options
        self.opening = opened(connection, options.revision)
        tools = connection.request("tools/list", {}).get("result", {}).get("tools", [])
        self.tools = {tool["name"]: tool for tool in tools}
        if options.placement is None:  # P26: not told, the kit sends the key where the server says it reads it
            connection.placement = advertised_placement(self.opening["capabilities"], tools)
        missing = [name for name in (options.charge_tool, options.count_tool) if name not in self.tools]
        if missing:
            raise ConnectionError(
                f"the server lists no tool {', '.join(missing)} (the fixture contract; "
                "name yours with --charge-tool and --count-tool)"
            )

    def __getattr__(self, name):
        return getattr(self.connection, name)

    @contextlib.contextmanager
    def variant(self, variant: str):
        """Another of the command line's servers (VARIANTS), opened for one check; None when none is named."""
        connection = connect(self.options, variant)
        try:
            yield None if connection is None else Server(connection, self.options)
        finally:
            if connection is not None:
                connection.close()

    def as_other(self, credential: str) -> "Server":
        """The same endpoint spoken to with another credential (CREDENTIALS); SKIPPED without one."""
        token = getattr(self.options, credential)
        if token is None or not isinstance(self.connection, Http):
            raise NotRun(credential)
        headers = {**self.options.headers, "Authorization": f"Bearer {token}"}
        other = Http(urllib.parse.urlunsplit(self.connection.url), self.options.timeout, headers)
        other.placement, other.tool_arguments = self.connection.placement, self.connection.tool_arguments
        return Server(other, self.options)

    def send_call(self, name: str, arguments=None, key=None, **params) -> int:
        params = {"name": name, **({} if arguments is None else {"arguments": arguments}), **params}
        if key is not None:
            params["idempotencyKey"] = key
        return self.connection.send_request("tools/call", params)

    def call(self, name: str, arguments=None, key=None, **params) -> dict:
        return self.connection.reply(self.send_call(name, arguments, key, **params))

    def charge_arguments(self, amount) -> dict:
        return {self.options.amount_argument: amount}

    def send_charge(self, amount=100, key=None) -> int:
        return self.send_call(self.options.charge_tool, self.charge_arguments(amount), key)

    def charge(self, amount=100, key=None) -> dict:
        return self.connection.reply(self.send_charge(amount, key))

    def count(self) -> int:
        """How many side effects the charge tool has had: the count tool's answer, read without a key."""
        result = self.call(self.options.count_tool, {}).get("result")
        if result is None:
            raise Failed(f"{self.options.count_tool} did not answer with a result")
        return count_in(result, self.options.count_field)


class FixtureBroken(Exception):
    """The fixture contract's tools, called as the command line says, do not work: a check could say nothing."""


def fixture_works(server: Server) -> None:
    """Before any check: one unkeyed charge succeeds and moves the count by one. Else FixtureBroken, naming the
    tool and its answer, so that a charge tool wanting other arguments is not taken for a server breaking rules."""
    before = fixture_count(server)
    arguments = {**server.connection.tool_arguments, **server.charge_arguments(100)}
    answer = server.charge(100)
    if not succeeded(answer):
        raise FixtureBroken(
            f"the charge tool {server.options.charge_tool} did not succeed with the arguments {json.dumps(arguments)}: "
            f"it answered {json.dumps(answer.get('error') or answer.get('result'))} (--charge-tool, "
            "--amount-argument, --tool-arguments)"
        )
    after = fixture_count(server)
    if after != before + 1:
        raise FixtureBroken(
            f"the count did not move by one: {server.options.count_tool}'s {server.options.count_field} was "
            f"{before}, then {after} after a charge {server.options.charge_tool} that succeeded (--count-tool, "
            "--count-field)"
        )


def fixture_count(server: Server) -> int:
    """The count tool's count, or FixtureBroken naming the tool and what it answered."""
    answer = server.call(server.options.count_tool, {})
    try:
        return count_in(answer["result"], server.options.count_field)
    except (KeyError, ValueError, TypeError, AttributeError):
        raise FixtureBroken(
            f"the count tool {server.options.count_tool} gave no count {server.options.count_field}: it answered "
            f"{json.dumps(answer.get('error') or answer.get('result'))} (--count-tool, --count-field, --tool-arguments)"
        ) from None


def count_in(result: dict, field: str) -> int:
    """The count in a count tool's result: structuredContent[field], else its first text as JSON or an integer."""
    if isinstance(result.get("structuredContent"), dict) and field in result["structuredContent"]:
        return int(result["structuredContent"][field])
    text = next((item["text"] for item in result.get("content", []) if item.get("type") == "text"), "")
    value = json.loads(text)
    return int(value[field] if isinstance(value, dict) else value)


def new_key() -> str:
    return f"kit-{uuid.uuid4()}"


def error_type(response: dict):
    error = response.get("error")
    return None if error is None else (error.get("data") or {}).get("type")


def succeeded(response: dict) -> bool:
    return "result" in response and not response["result"].get("isError")


# ----------------------------------------------------------------------------
# 3. The checks
# ----------------------------------------------------------------------------

CHECKS: list = []


class Check:
    """One check: an id, a one-line name, MUST/SHOULD/POSITION, the rows it tests, the server it needs."""

    def __init__(self, id, name, severity, rows, needs, run, uses=()):
        self.id, self.name, self.severity, self.rows, self.needs, self.run = id, name, severity, rows, needs, run
        self.uses = tuple(uses)  # other servers it opens itself where given (Server.variant)
        self.description = " ".join((run.__doc__ or name).split())


def check(id: str, name: str, severity: str, rows: list, needs: str = "main", uses: tuple = ()):
    """Register a check: `rows` are the SEP rows and project positions it tests; `needs` the server it runs on;
    `uses` the other servers it opens for rows of its own, where the command line names them."""

    def register(run):
        CHECKS.append(Check(f"sep-3182-{id}", name, severity, rows, needs, run, uses))
        return run

    return register


# --- C: the capability -------------------------------------------------------


@check(
    "capability-declared",
    "capabilities.tools.idempotency is an object where a client discovers it",
    "MUST",
    ["C1", "C2", "L1", "P11", "P14"],
)
def capability_declared(server: Server) -> dict:
    """A server that supports SEP-3182 declares capabilities.tools.idempotency as an object, in the
    server/discover result (2026-07-28) or the initialize result (2025 handshake); its settings
    (maxKeyLength, retentionSeconds) are sep-3182-capability-settings' business. In the meta
    placement (P26) the object is capabilities.extensions[EXTENSION_ID] instead."""
    where, advertised = capability(server)
    expect(advertised is not None, f"{where} is absent: {server.opening['capabilities']}")
    expect(isinstance(advertised, dict), f"{where} is {advertised!r}, not an object")
    return {"revision": server.opening["revision"], where: advertised}


def capability(server: Server) -> tuple[str, object]:
    """P26: where the placement advertises SEP-3182, and what the server put there (None for nothing)."""
    capabilities = server.opening["capabilities"]
    if server.connection.placement == "meta":
        return f"capabilities.extensions[{EXTENSION_ID}]", (capabilities.get("extensions") or {}).get(EXTENSION_ID)
    return "capabilities.tools.idempotency", (capabilities.get("tools") or {}).get("idempotency")


SETTINGS = ("maxKeyLength", "retentionSeconds")
LONGEST_KEY_TRIED = 1024 * 1024  # a maxKeyLength beyond this is not sent: the kit will not send gigabytes


def positive_integer(value) -> bool:
    """A JSON integer above zero (true is not 1; 255.0 is a number a client may not read as an integer)."""
    return type(value) is int and value > 0


@check(
    "capability-settings",
    "the capability's maxKeyLength and retentionSeconds are positive integers, and "
    "maxKeyLength is the longest key accepted",
    "MUST",
    ["C2", "WG1.6", "P2", "P8"],
)
def capability_settings(server: Server) -> dict:
    """The settings: capabilities.tools.idempotency = {"maxKeyLength": N, "retentionSeconds": R}. Each present is a
    positive integer (MUST); a key of exactly N characters is accepted (the call runs), one of N + 1 is
    refused as invalid_idempotency_key and runs nothing (MUST). A server SHOULD advertise both: absent, a
    WARNING. No capability at all is sep-3182-capability-declared's failure, not this check's."""
    where, settings = capability(server)
    if not isinstance(settings, dict):
        raise Skipped(f"{where} is {settings!r}: see sep-3182-capability-declared")
    wrong = {name: settings[name] for name in SETTINGS if name in settings and not positive_integer(settings[name])}
    expect(not wrong, f"not positive integers: {wrong}")
    longest = settings.get("maxKeyLength")
    if longest is not None and longest <= LONGEST_KEY_TRIED:
        suffix = uuid.uuid4().hex[:8]
        key = ("k" * max(longest - len(suffix), 0) + suffix)[-longest:]
        before = server.count()
        first = server.charge(100, key)
        expect(
            succeeded(first) and server.count() == before + 1,
            f"a key of exactly maxKeyLength ({longest}) characters was not accepted: {json.dumps(first)[:200]}",
        )
        before = server.count()
        refused = server.charge(100, key + "k")
        expect(
            error_type(refused) == INVALID_KEY,
            f"a key of maxKeyLength + 1 ({longest + 1}) characters was not refused as {INVALID_KEY}: "
            f"{json.dumps(refused)[:200]}",
        )
        expect(server.count() == before, f"a key of maxKeyLength + 1 ({longest + 1}) characters was refused, but ran")
    absent = [name for name in SETTINGS if name not in settings]
    if absent:
        raise ShouldUnmet(f"{where} advertises no {' and no '.join(absent)} (SHOULD)")
    return {"settings": settings}


# --- S0, S2: a repeated key --------------------------------------------------


@check(
    "repeat-executes-once",
    "a repeated key (new JSON-RPC id) runs the tool once and returns the same result",
    "MUST",
    ["S0", "S2", "W4", "W7"],
)
def repeat_executes_once(server: Server) -> dict:
    """Two tools/calls with one key and equal arguments, under different JSON-RPC ids: one side effect,
    and the second answer is the first's result."""
    key, before = new_key(), server.count()
    first = server.charge(100, key)
    expect(succeeded(first), f"the first keyed charge failed: {first}")
    retry = server.charge(100, key)
    expect(server.count() == before + 1, f"the tool ran {server.count() - before} times for one key")
    expect(retry.get("result") == first["result"], f"the retry's answer differs: {retry}")
    return {"key": key}


@check(
    "replay-not-refreshed",
    "a replay is the recorded outcome, not recomputed against today's state",
    "MUST",
    ["S2a", "S2b"],
)
def replay_not_refreshed(server: Server) -> dict:
    """After the world moves on (an unkeyed charge), a retry still returns the original result, with no
    replay marker added."""
    key = new_key()
    original = server.charge(100, key)
    server.charge(7)
    before = server.count()
    replay = server.charge(100, key)
    expect(server.count() == before, "the retry ran the tool again")
    expect(replay.get("result") == original["result"], f"the replay differs from the original: {replay}")


def acknowledgement_of(response: dict):
    """What a result says of its key in its _meta, under the extension's identifier (None: nothing)."""
    return ((response.get("result") or {}).get("_meta") or {}).get(EXTENSION_ID)


@check(
    "result-acknowledged",
    "a keyed call's result carries the acknowledgement of its key, and its replay carries it identically",
    "MUST",
    ["S2", "P33"],
)
def result_acknowledged(server: Server) -> dict:
    """In the extension's placement, a keyed charge's result says its key was honoured:
    _meta[EXTENSION_ID] = {"idempotencyKey": key}, recorded with it, so the replay carries the same member.
    The SEP's field (--placement params) names no extension and defines no acknowledgement: not applicable."""
    if server.connection.placement != "meta":
        raise NotApplicable("the acknowledgement is the extension's (--placement meta); the SEP's field has none")
    key = new_key()
    first = server.charge(100, key)
    expect(succeeded(first), f"the first keyed charge failed: {first}")
    said = acknowledgement_of(first)
    expect(said == {"idempotencyKey": key}, f"the first answer's acknowledgement is {said!r}, not of its key")
    replayed = acknowledgement_of(server.charge(100, key))
    expect(replayed == said, f"the replay's acknowledgement is {replayed!r}, not the first answer's {said!r}")
    return {"acknowledgement": said}


@check(
    "error-outcome-recorded",
    "a tool error is an outcome: recorded, replayed, and a changed retry conflicts",
    "MUST",
    ["S2", "S3", "P6"],
)
def error_outcome_recorded(server: Server) -> dict:
    """The previously produced result is returned "whether that result was a successful response or an
    error response": a keyed charge the tool refuses is replayed, and the same key with corrected
    arguments is a conflict, not a new charge."""
    key, before = new_key(), server.count()
    refused = server.charge(server.options.refused_amount, key)
    if succeeded(refused):
        raise Skipped(
            f"the charge tool accepted {server.options.refused_amount}; name an amount it refuses with --refused-amount"
        )
    replay = server.charge(server.options.refused_amount, key)
    expect(
        {k: v for k, v in replay.items() if k != "id"} == {k: v for k, v in refused.items() if k != "id"},
        f"the error was not replayed: first {refused}, then {replay}",
    )
    corrected = server.charge(100, key)
    expect(server.count() == before, "the same key with corrected arguments ran the tool")
    expect("error" in corrected, f"the same key with corrected arguments was not rejected: {corrected}")


@check(
    "conflict-leaves-the-record",
    "a rejected conflict is not recorded: the original still replays",
    "MUST",
    ["S2", "S3", "K4", "P6"],
)
def conflict_leaves_the_record(server: Server) -> dict:
    """The server's own rejections are answers to one request, not outcomes of the key: after a conflict,
    a retry of the original is still answered with the original's result."""
    key = new_key()
    original = server.charge(100, key)
    server.charge(200, key)
    before = server.count()
    again = server.charge(100, key)
    expect(server.count() == before, "the original's retry ran the tool again")
    expect(again.get("result") == original["result"], f"the original no longer replays after a conflict: {again}")


@check("read-only-tool-deduplicated", "a read-only tool is deduplicated like any other", "POSITION", ["A1", "P13"])
def read_only_tool_deduplicated(server: Server) -> dict:
    """The SEP exempts no tool by its hints: a keyed call of the count tool replays its first answer."""
    key = new_key()
    recorded = server.call(server.options.count_tool, {}, key)
    server.charge(7)
    replay = server.call(server.options.count_tool, {}, key)
    expect(replay.get("result") == recorded.get("result"), "the read-only tool ran again for a repeated key")


# --- S3: same key, other arguments --------------------------------------------


def shaped(data, kind: str, key: str) -> bool:
    """Is error.data {type, idempotencyKey} as P5 says? A `retryable` member beside them is allowed
    here; whether it holds the right value is sep-3182-rejection-retryable's business."""
    return isinstance(data, dict) and {name: value for name, value in data.items() if name != "retryable"} == {
        "type": kind,
        "idempotencyKey": key,
    }


def conflict_problem(response: dict, key: str) -> str | None:
    """Why `response` is not the conflict the SEP describes (S3b) with this project's code (P5)."""
    if "error" not in response:
        return f"not rejected: {response}"
    if not shaped(response["error"].get("data"), CONFLICT, key):
        return f"error.data is {response['error'].get('data')!r}"
    return None


@check("conflict-rejected", "the same key with different arguments is rejected and runs nothing", "MUST", ["S3", "E1"])
def conflict_rejected(server: Server) -> dict:
    """Reuse of a key with other arguments is rejected: the tool does not run with the new arguments, and
    the cached result is not returned."""
    key = new_key()
    original = server.charge(100, key)
    before = server.count()
    changed = server.charge(200, key)
    expect(server.count() == before, "the changed request ran the tool")
    expect(changed.get("result") != original["result"], "the cached result came back for other arguments")
    expect("error" in changed, f"the changed request was not rejected: {changed}")


@check(
    "conflict-error-data",
    "a conflict carries error.data {type: idempotency_key_conflict, idempotencyKey}",
    "SHOULD",
    ["S3b", "P5"],
)
def conflict_error_data(server: Server) -> dict:
    key = new_key()
    server.charge(100, key)
    problem = conflict_problem(server.charge(200, key), key)
    expect(problem is None, problem or "")


@check("error-code", "idempotency errors use JSON-RPC code -32602", "POSITION", ["S3a", "P5"])
def error_code(server: Server) -> dict:
    """The SEP names no code; this project uses -32602 for every idempotency rejection."""
    key = new_key()
    server.charge(100, key)
    conflict = server.charge(200, key)
    expect(conflict.get("error", {}).get("code") == INVALID_PARAMS, f"the conflict's error is {conflict.get('error')}")


def charge_members(server: Server, arguments: str) -> str:
    """The params members of a charge call, `arguments` spelled exactly as given ("amount" renamed)."""
    arguments = arguments.replace('"amount"', json.dumps(server.options.amount_argument))
    return f'"name":{json.dumps(server.options.charge_tool)},"arguments":{arguments}'


def first_then_retry(server: Server, first: str, retry: str) -> tuple[dict, dict, str]:
    """`first` under a fresh key, an unkeyed charge, then `retry` under the same key: both answers."""
    key = new_key()
    original = server.reply(server.send_spelled("tools/call", f'{first},"idempotencyKey":{json.dumps(key)}'))
    if not succeeded(original):
        raise Skipped(
            f"the first spelling did not succeed ({original}); the charge tool must accept "
            "and ignore an extra argument member"
        )
    server.charge(7)  # a second execution could not return the original's result now
    before = server.count()
    answer = server.reply(server.send_spelled("tools/call", f'{retry},"idempotencyKey":{json.dumps(key)}'))
    expect(server.count() == before, f"the retry ran the tool ({first} then {retry})")
    return original, answer, key


def spelling_rows(server: Server, rows: list, want: str) -> dict:
    """Each (first, retry) pair must be a replay or a conflict; every row runs, and the failures are listed.
    Conflicts not shaped as P5 says (-32602, error.data type and key) are listed in the details."""
    wrong, unshaped = {}, {}
    for label, first, retry in rows:
        original, answer, key = first_then_retry(
            server,
            charge_members(server, first) if first[0] == "{" else first,
            charge_members(server, retry) if retry[0] == "{" else retry,
        )
        if want == "replay" and answer.get("result") != original["result"]:
            wrong[label] = f"not replayed: {answer}"
        if want == "conflict" and "error" not in answer:
            wrong[label] = f"not rejected: {answer}"
        elif want == "conflict" and (conflict_problem(answer, key) or answer["error"].get("code") != INVALID_PARAMS):
            unshaped[label] = answer["error"]
    expect(not wrong, "; ".join(f"{label}: {why}" for label, why in wrong.items()))
    return {"rows": [label for label, _, _ in rows], **({"unshaped": unshaped} if want == "conflict" else {})}


@check("equivalence-serialisation", "member order and whitespace do not make requests differ", "MUST", ["E2", "E6"])
def equivalence_serialisation(server: Server) -> dict:
    return spelling_rows(
        server,
        [
            ("member order", '{"amount":100,"note":"x"}', '{"note":"x","amount":100}'),
            ("whitespace", '{"amount":100}', '{ "amount" :\t100 }'),
            (
                "nested member order",
                '{"amount":100,"note":{"a":1,"b":{"c":2,"d":[3,4]}}}',
                '{"note":{"b":{"d":[3,4],"c":2},"a":1},"amount":100}',
            ),
        ],
        "replay",
    )


@check("equivalence-numbers", "numbers of equal value compare equal (1, 1.0, 1e0; -0 and 0)", "MUST", ["E3", "E6"])
def equivalence_numbers(server: Server) -> dict:
    return spelling_rows(
        server,
        [
            ("100 vs 100.0", '{"amount":100}', '{"amount":100.0}'),
            ("100 vs 1e2", '{"amount":100}', '{"amount":1e2}'),
            ("100.0 vs 1E+2", '{"amount":100.0}', '{"amount":1E+2}'),
            ("1 vs 1e0", '{"amount":100,"note":1}', '{"amount":100,"note":1e0}'),
            ("0.5 vs 5e-1", '{"amount":100,"note":0.5}', '{"amount":100,"note":5e-1}'),
            ("1e20 vs its integer", '{"amount":100,"note":1e20}', '{"amount":100,"note":100000000000000000000}'),
            ("-0 vs 0", '{"amount":100,"note":-0}', '{"amount":100,"note":0}'),
            ("-0.0 vs 0", '{"amount":100,"note":-0.0}', '{"amount":100,"note":0}'),
            (
                "nested numbers",
                '{"amount":100,"note":[1.0,{"x":-0,"y":2e0}]}',
                '{"amount":100,"note":[1,{"y":2,"x":0}]}',
            ),
        ],
        "replay",
    )


@check("equivalence-strings", "strings compare after unescaping", "MUST", ["E4", "E6"])
def equivalence_strings(server: Server) -> dict:
    return spelling_rows(
        server,
        [
            ("escaped vs literal", '{"amount":100,"note":"caf\\u00e9"}', '{"amount":100,"note":"café"}'),
            ("escaped surrogate pair", '{"amount":100,"note":"\\ud83d\\udd11"}', '{"amount":100,"note":"🔑"}'),
        ],
        "replay",
    )


@check("equivalence-meta-ignored", "_meta (the progress token included) is not compared", "MUST", ["E1"])
def equivalence_meta_ignored(server: Server) -> dict:
    """Equivalence is decided solely by the tool name and the arguments."""
    return spelling_rows(
        server,
        [
            (
                "other progress token",
                charge_members(server, '{"amount":100}') + ',"_meta":{"progressToken":"first"}',
                charge_members(server, '{"amount":100}') + ',"_meta":{"progressToken":"retry","io.example/trace":"t"}',
            ),
            (
                "_meta absent vs present",
                charge_members(server, '{"amount":100}'),
                charge_members(server, '{"amount":100}') + ',"_meta":{"progressToken":7}',
            ),
        ],
        "replay",
    )


@check("equivalence-absent-arguments", "absent arguments equal {}", "POSITION", ["E7", "P3"])
def equivalence_absent_arguments(server: Server) -> dict:
    count_tool = json.dumps(server.options.count_tool)
    return spelling_rows(
        server,
        [
            ("absent vs {}", f'"name":{count_tool}', f'"name":{count_tool},"arguments":{{}}'),
        ],
        "replay",
    )


@check(
    "different-requests-conflict",
    "values that differ after parsing are different requests",
    "MUST",
    ["E1", "E3", "E4", "S3"],
)
def different_requests_conflict(server: Server) -> dict:
    """true is not 1, null is not 0, a string is not a number, NFC is not NFD, array order counts; and another
    tool with the same arguments is another request."""
    rows = [
        ("different amount", '{"amount":100}', '{"amount":200}'),
        ("true vs 1", '{"amount":100,"note":true}', '{"amount":100,"note":1}'),
        ("false vs 0", '{"amount":100,"note":false}', '{"amount":100,"note":0}'),
        ("null vs 0", '{"amount":100,"note":null}', '{"amount":100,"note":0}'),
        ("string vs number", '{"amount":100,"note":"1"}', '{"amount":100,"note":1}'),
        ("NFC vs NFD", '{"amount":100,"note":"caf\u00e9"}', '{"amount":100,"note":"cafe\u0301"}'),
        ("array order", '{"amount":100,"note":[1,2]}', '{"amount":100,"note":[2,1]}'),
        ("nested value", '{"amount":100,"note":{"a":[1,{"b":1}]}}', '{"amount":100,"note":{"a":[1,{"b":2}]}}'),
    ]
    other = server.options.other_tool in server.tools and server.options.other_tool != server.options.charge_tool
    if other:
        rows.append(
            (
                "another tool",
                '{"amount":100}',
                f'"name":{json.dumps(server.options.other_tool)},'
                f'"arguments":{{{json.dumps(server.options.amount_argument)}:100}}',
            )
        )
    details = spelling_rows(server, rows, "conflict")
    if not other:  # E1's tool-name half never ran: the check cannot say SUCCESS
        raise PartlyRun(
            "another tool's name under one key (E1)",
            "give --other-tool, a second tool taking the charge tool's arguments",
            f"the {len(rows)} rows of other arguments were conflicts",
        )
    return details


@check("equivalence-null-member", "a null member is not an absent one", "POSITION", ["E7", "P3"])
def equivalence_null_member(server: Server) -> dict:
    return spelling_rows(
        server,
        [
            ("null member vs absent", '{"amount":100,"note":null}', '{"amount":100}'),
            ("nested null vs absent", '{"amount":100,"note":{"a":null}}', '{"amount":100,"note":{}}'),
        ],
        "conflict",
    )


@check(
    "large-integers-exact",
    "integers past 2^53 are compared exactly, or the keyed call is refused; never replayed rounded",
    "MUST",
    ["E7", "WG1.1", "P3"],
)
def large_integers_exact(server: Server) -> dict:
    """Exact integers: under one key, 9007199254740993 then 9007199254740992 is a conflict (a parser that holds
    integers exactly), or the first keyed call is refused with -32602 and no data.type (one that cannot),
    nothing run and nothing recorded: the key then runs a call of its own. A replay across the two is
    what a parser reading doubles does, and a FAILURE."""
    key, before = new_key(), server.count()
    members = charge_members(server, '{"amount":100,"note":9007199254740993}')
    first = server.reply(server.send_spelled("tools/call", f'{members},"idempotencyKey":{json.dumps(key)}'))
    if "error" in first:  # the refusal a double-reading parser owes
        error = first["error"]
        expect(
            error.get("code") == INVALID_PARAMS and error_type(first) is None,
            f"the refusal is not -32602 without data.type: {error}",
        )
        expect(server.count() == before, "the refused call ran the tool")
        later = server.charge(100, key)
        expect(
            succeeded(later) and server.count() == before + 1,
            f"the key was recorded by its refusal: the next call under it got {later}",
        )
        return {"outcome": "refused", "error": error}
    expect(succeeded(first), f"the first call neither ran nor was refused: {first}")
    server.charge(7)  # a second execution could not return the original's result now
    before = server.count()
    members = charge_members(server, '{"amount":100,"note":9007199254740992}')
    second = server.reply(server.send_spelled("tools/call", f'{members},"idempotencyKey":{json.dumps(key)}'))
    expect(
        second.get("result") != first["result"],
        "2^53 + 1 and 2^53 were one request: the first's result was replayed (the integers were compared rounded)",
    )
    expect(server.count() == before, "the second integer ran the tool under the first's key")
    expect(error_type(second) == CONFLICT, f"2^53 under 2^53 + 1's key is no conflict: {second}")
    return {"outcome": "conflict"}


# --- W, P1, P2: where the key is, which keys are valid -------------------------


@check(
    "key-only-in-params",
    "a field named idempotencyKey in arguments or _meta, or a key in the other placement, is not a key",
    "POSITION",
    ["W1", "P1", "P26"],
)
def key_only_in_params(server: Server) -> dict:
    """The key is params.idempotencyKey, beside name and arguments (or, in the meta placement, the extension's
    _meta key); nothing else deduplicates, the other placement's key included (P26)."""
    amount = server.options.amount_argument
    other_place = (
        ("in params (the SEP's placement)", {"idempotencyKey": new_key()})
        if server.connection.placement == "meta"
        else ("in _meta (the extension's placement)", {"_meta": {META_KEY: new_key()}})
    )
    for label, params in [
        ("inside arguments", {"arguments": {amount: 100, "idempotencyKey": new_key()}}),
        ("inside _meta", {"arguments": {amount: 100}, "_meta": {"idempotencyKey": new_key()}}),
        (other_place[0], {"arguments": {amount: 100}, **other_place[1]}),
    ]:
        before = server.count()
        for _ in range(2):
            server.reply(server.send_request("tools/call", {"name": server.options.charge_tool, **params}, False))
        expect(server.count() == before + 2, f"a key {label} deduplicated the call")


@check("no-key-runs-every-time", "a call without a key (absent or null) runs every time", "MUST", ["W1", "C5", "P2"])
def no_key_runs_every_time(server: Server) -> dict:
    """The key is optional: without one, a call runs as it did before the SEP."""
    for label, extra in [("absent", {}), ("null", {"idempotencyKey": None})]:
        before = server.count()
        arguments = server.charge_arguments(100)
        server.call(server.options.charge_tool, arguments, **extra)
        server.call(server.options.charge_tool, arguments, **extra)
        expect(server.count() == before + 2, f"two calls with the key {label} ran {server.count() - before} times")


@check(
    "odd-keys-are-keys",
    "any string is a key: one character, 255, emoji, NUL or newline inside",
    "MUST",
    ["W3", "W6", "P2"],
)
def odd_keys_are_keys(server: Server) -> dict:
    """The key is an opaque string with no format: each runs once, then replays."""
    suffix = uuid.uuid4().hex[:8]
    for key in [f"k{suffix}", ("k" * 247) + suffix, f"🔑{suffix}", f"nul\x00{suffix}", f"new\nline{suffix}"]:
        before = server.count()
        first, retry = server.charge(100, key), server.charge(100, key)
        expect(server.count() == before + 1, f"key {key[:20]!r} ran {server.count() - before} times")
        expect(retry.get("result") == first.get("result"), f"key {key[:20]!r} was not replayed: {retry}")


@check(
    "invalid-key-rejected",
    "a key that is not a string of 1 to 255 characters is refused before anything runs",
    "POSITION",
    ["W6", "P2", "P5"],
)
def invalid_key_rejected(server: Server) -> dict:
    """-32602 with error.data.type invalid_idempotency_key for a number, boolean, object, array, empty or
    256-character key; nothing runs, and the same call without a key then works."""
    wrong = []
    for bad in [42, True, {"key": "k"}, ["k"], "", "k" * 256]:
        before = server.count()
        answer = server.call(server.options.charge_tool, server.charge_arguments(100), idempotencyKey=bad)
        if (
            server.count() != before
            or error_type(answer) != INVALID_KEY
            or answer["error"].get("code") != INVALID_PARAMS
        ):
            wrong.append(f"{json.dumps(bad)[:12]} -> {json.dumps(answer)[:160]}")
    expect(not wrong, "; ".join(wrong))


@check(
    "oversized-key-not-echoed",
    "a one-megabyte key is never echoed back, on a fresh call or in a conflict",
    "POSITION",
    ["P2"],
)
def oversized_key_not_echoed(server: Server) -> dict:
    """On a fresh call, and on the conflict path: a server that takes the key as valid must not echo it in
    the conflict it answers the same key with other arguments. A result's acknowledgement names the key the
    server took, by design (P33), and is not counted."""
    oversized = f"k{uuid.uuid4().hex}" + "k" * (1024 * 1024)
    for label, amount in [("the fresh call's", 100), ("the same key with other arguments'", 200)]:
        line = server.raw_reply(
            server.send_call(server.options.charge_tool, server.charge_arguments(amount), oversized)
        )
        echoed = without_acknowledgement(line, oversized)
        expect(len(echoed) < 1024, f"{label} answer is {len(echoed)} bytes long")


def without_acknowledgement(line: str, key: str) -> str:
    """An answer as it came, less the acknowledgement of `key` in its result's _meta, if it carries one."""
    answer = json.loads(line)
    meta = (answer.get("result") or {}).get("_meta") or {}
    if meta.get(EXTENSION_ID) != {"idempotencyKey": key}:
        return line
    del meta[EXTENSION_ID]
    return json.dumps(answer)


@check("other-methods-ignore-the-key", "a key on a method other than tools/call is not examined", "MUST", ["W2"])
def other_methods_ignore_the_key(server: Server) -> dict:
    """Only tools/call is covered: tools/list with any idempotencyKey is served as usual."""
    for key in ["w2-key", 7]:
        listed = server.request("tools/list", {"idempotencyKey": key})
        expect("result" in listed, f"tools/list with idempotencyKey {key!r} was refused: {listed}")


# --- S1, P4, P7: calls in flight (a server whose charge is slow) ----------------


def settle(server: Server) -> None:
    """Give a call just sent time to reach the tool on a slow server."""
    time.sleep(server.options.settle)


def slow_call(server: Server, amount, key: str, **params) -> int:
    """Send a keyed charge (with any other `params`) to the slow server and wait until it must be running; its id."""
    request_id = server.send_call(server.options.charge_tool, server.charge_arguments(amount), key, **params)
    time.sleep(server.options.settle)
    if server.answered(request_id):
        raise Inconclusive(
            f"a charge was answered within {server.options.settle:g} s: the server named by "
            "--slow-command or --slow-url must take at least two seconds to charge"
        )
    return request_id


def in_arrival_order(server: Server, request_ids: list) -> list:
    """Wait for every answer; the ids in the order their answers arrived (polled every 10 ms)."""
    order, deadline = [], time.monotonic() + server.options.timeout
    while len(order) < len(request_ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer to {set(request_ids) - set(order)} in {server.options.timeout:g} s")
        order += [request_id for request_id in request_ids if request_id not in order and server.answered(request_id)]
        time.sleep(0.01)
    return order


def overlapping(server: Server, first_amount, second_amount) -> tuple[dict, dict, bool, str, int]:
    """Two keyed charges, the second sent while the first runs. Either may win the key (over HTTP or under
    load the second can land first): the winner's answer, the other's, whether the other's came while
    the winner was still unanswered, the key, and how many charges they made."""
    key, before = new_key(), server.count()
    first = slow_call(server, first_amount, key)
    second = server.send_charge(second_amount, key)
    order = in_arrival_order(server, [first, second])
    answers = {request_id: server.reply(request_id) for request_id in order}
    loser = next((request_id for request_id in order if "error" in answers[request_id]), second)
    winner = first if loser == second else second
    return answers[winner], answers[loser], order[0] == loser, key, server.count() - before


@check(
    "in-flight-duplicate-not-executed",
    "a duplicate of a running call does not start a second execution",
    "MUST",
    ["S0", "S1"],
    needs="slow",
)
def in_flight_duplicate_not_executed(server: Server) -> dict:
    _, _, _, _, charges = overlapping(server, 100, 100)
    expect(charges == 1, f"two overlapping calls with one key charged {charges} times")


@check(
    "in-flight-duplicate-rejected-at-once",
    "a duplicate of a running call is rejected at once, not queued",
    "SHOULD",
    ["S1"],
    needs="slow",
)
def in_flight_duplicate_rejected_at_once(server: Server) -> dict:
    """The server SHOULD reject the duplicate at once with an "already in progress" error; it MUST NOT make it
    wait indefinitely, and the SEP names queuing behind the original as not the chosen behaviour."""
    _, duplicate, early, _, _ = overlapping(server, 100, 100)
    expect("error" in duplicate, f"both got a result: the duplicate waited for the original: {duplicate}")
    expect(early, "the duplicate's rejection came only after the original finished")


@check(
    "in-progress-error-data",
    "the in-progress error carries error.data {type: idempotency_key_in_progress, idempotencyKey}",
    "SHOULD",
    ["S1a", "P5"],
    needs="slow",
)
def in_progress_error_data(server: Server) -> dict:
    _, duplicate, _, key, _ = overlapping(server, 100, 100)
    expect(shaped(duplicate.get("error", {}).get("data"), IN_PROGRESS, key), f"the duplicate's answer: {duplicate}")


@check(
    "conflict-while-running",
    "other arguments under a running call's key are a conflict, and run nothing",
    "MUST",
    ["S3", "P4"],
    needs="slow",
)
def conflict_while_running(server: Server) -> dict:
    """The fingerprint is compared first, so a changed request is a conflict even before the original ends."""
    _, duplicate, _, _, charges = overlapping(server, 100, 200)
    expect(charges == 1 and "error" in duplicate, f"the changed request ran ({charges} charges): {duplicate}")
    if error_type(duplicate) != CONFLICT:
        raise Inconclusive(f"rejected, but not as a conflict (P4 checks the fingerprint first): {duplicate['error']}")


@check(
    "cancelled-call-runs-once",
    "a cancelled keyed call runs to completion once; its retry never runs it again",
    "POSITION",
    ["S0", "S4", "P7"],
    needs="slow",
)
def cancelled_call_runs_once(server: Server) -> dict:
    """The client gives up (notifications/cancelled on stdio; over HTTP a closed connection, mid-stream where the
    server answers in SSE, which 2026-07-28 makes a cancel) and retries under the same key at once: the original
    still runs, so the retry is in progress. The kit then only reads the count: the original's charge must land on
    its own, no keyed retry sent meanwhile (a run the cancel stopped charges only once a retry takes its key over,
    after a lease). Then the retry gets the result, and the tool ran once. The call asks for progress, so that a
    server that reports it has begun its SSE stream when the kit closes it; the details say how it was given up."""
    key, before = new_key(), server.count()
    asks_progress = {"_meta": {"progressToken": f"progress-{key}"}}  # each retry sends the same

    def retried() -> dict:
        return server.call(server.options.charge_tool, server.charge_arguments(100), key, **asks_progress)

    how = server.cancel(slow_call(server, 100, key, **asks_progress))
    retry = retried()
    expect(error_type(retry) == IN_PROGRESS, f"{how}; the retry sent at once was not in progress: {retry}")
    deadline = time.monotonic() + server.options.timeout
    while server.count() == before and time.monotonic() < deadline:
        time.sleep(0.25)
    expect(
        server.count() == before + 1,
        f"{how}; {server.count() - before} charges {server.options.timeout:g} s after the cancel, with no retry "
        "sent meanwhile: the cancelled call did not run to completion",
    )
    while not succeeded(retry := retried()) and time.monotonic() < deadline:
        time.sleep(0.25)  # a server may count the charge a moment before it records the key's outcome
    expect(succeeded(retry), f"{how}; the key never gave a result after the cancel: {retry}")
    expect(
        server.count() == before + 1,
        f"{how}; the cancelled call and its retries charged {server.count() - before} times",
    )
    expect(server.alive(), f"{how}; the server stopped answering")
    return {"cancelledBy": how}


# --- R1, R5: retention (a server whose window the kit can wait out) -------------


@check(
    "retention-window",
    "a key replays inside the window and may run anew after it",
    "MUST",
    ["R1", "R2", "R5", "P8"],
    needs="short_retention",
)
def retention_window(server: Server) -> dict:
    """State is kept for a bounded window: the key replays inside it; past it, it counts as new (MAY)."""
    window = server.options.short_retention
    key, before = new_key(), server.count()
    first = server.charge(100, key)
    expect(
        server.charge(100, key).get("result") == first["result"] and server.count() == before + 1,
        "the key did not replay inside its window",
    )
    time.sleep(window + 1)
    server.charge(100, key)
    if server.count() != before + 2:
        raise Inconclusive(f"the key still replayed {window + 1:g} s later, past the window of {window:g} s")


# --- R6, P9: the bound ----------------------------------------------------------


@check(
    "store-bound",
    "a full store refuses a new key; replays and unkeyed calls still work",
    "POSITION",
    ["R6", "P9"],
    needs="bounded",
)
def store_bound(server: Server) -> dict:
    """When the store holds its maximum of records, a call with a new key is refused with
    idempotency_store_full rather than run without the guarantee."""
    stored = []
    for _ in range(server.options.max_records + 1):
        key = new_key()
        answer = server.charge(100, key)
        if error_type(answer) == STORE_FULL:
            break
        stored.append((key, answer))
    else:
        raise Failed(f"{server.options.max_records + 1} new keys were all accepted")
    as_p5 = answer["error"].get("code") == INVALID_PARAMS and shaped(answer["error"].get("data"), STORE_FULL, key)
    before = server.count()
    replay = server.charge(100, stored[0][0]) if stored else None
    expect(replay is None or replay.get("result") == stored[0][1]["result"], "a stored key did not replay while full")
    expect(succeeded(server.charge(100)), "a call without a key failed while the store was full")
    expect(server.count() == before + 1, "a refused or replayed call ran the tool")
    return {} if as_p5 else {"unshaped": answer["error"]}


@check(
    "share-per-principal",
    "one principal filling its share of the store leaves another principal's new keys accepted",
    "POSITION",
    ["R6", "K2", "P9'"],
    needs="bounded",
)
def share_per_principal(server: Server) -> dict:
    """One principal sends new keys to the bounded server until it is refused as full; a second principal's
    new key is then still accepted, because each principal holds at most its share, never the whole store."""
    other = server.as_other("second_bearer")
    accepted = 0
    while error_type(server.charge(100, new_key())) != STORE_FULL:
        accepted += 1
        if accepted > server.options.max_records:
            raise Failed(f"{accepted} new keys of one principal were all accepted")
    theirs = other.charge(100, new_key())
    expect(succeeded(theirs), f"after one principal's {accepted} new keys, another's new key got {theirs}")
    return {"acceptedBeforeFull": accepted}


# --- retryable rejections, a bounded running record -------------------------------


def retryable_problem(response: dict, kind: str) -> str | None:
    """Why a rejection of `kind` does not carry data.retryable as RETRYABLE says it must."""
    data = response["error"].get("data") or {}
    if data.get("retryable") is not RETRYABLE[kind]:
        return f"{kind}: data.retryable is {data.get('retryable', 'absent')!r}, not {json.dumps(RETRYABLE[kind])}"
    return None


def store_full_answer(server: Server):
    """New keys until the bounded server refuses one as full; that refusal, or None if none was."""
    for _ in range(server.options.max_records + 1):
        answer = server.charge(100, new_key())
        if error_type(answer) == STORE_FULL:
            return answer
    return None


@check(
    "rejection-retryable",
    "every idempotency rejection carries data.retryable: true for in progress and "
    "store full, false for conflict and invalid key",
    "MUST",
    ["S1a", "S3b", "WG1.2", "P5"],
    uses=("slow", "bounded"),
)
def rejection_retryable(server: Server) -> dict:
    """Retryable rejections: error.data.retryable is true for idempotency_key_in_progress, idempotency_store_full and
    idempotency_store_unavailable, false for idempotency_key_conflict and invalid_idempotency_key. The kit
    provokes a conflict and an invalid key here, an in-progress rejection on the slow server and a full
    store on the bounded one where they are given (it fills the bounded one's store). A rejection the kit
    could not provoke is NOT TESTED; whether the server rejects at all is other checks' business."""
    key, provoked = new_key(), {}
    server.charge(100, key)
    provoked[CONFLICT] = server.charge(200, key)
    provoked[INVALID_KEY] = server.call(server.options.charge_tool, server.charge_arguments(100), idempotencyKey="")
    untested = []
    with server.variant("slow") as slow:
        if slow is None:
            untested.append((IN_PROGRESS, "give --slow-command or --slow-url"))
        else:
            with contextlib.suppress(Inconclusive):
                provoked[IN_PROGRESS] = overlapping(slow, 100, 100)[1]
    with server.variant("bounded") as bounded:
        if bounded is None:
            untested.append((STORE_FULL, "give --bounded-command or --bounded-url"))
        else:
            provoked[STORE_FULL] = store_full_answer(bounded)
    rejected = {kind: answer for kind, answer in provoked.items() if answer is not None and error_type(answer) == kind}
    untested += [(kind, "the server never answered with it") for kind in provoked if kind not in rejected]
    wrong = [problem for kind, answer in rejected.items() if (problem := retryable_problem(answer, kind))]
    expect(not wrong, "; ".join(wrong))
    if untested:
        raise PartlyRun(
            " and ".join(f"data.retryable of {kind}" for kind, _ in untested),
            "; ".join(why for _, why in untested),
            f"{', '.join(rejected) or 'no rejection'} carried it right",
        )
    return {"rejections": sorted(rejected)}


RETRY_EVERY = 0.5  # seconds between the retries of a client that was told "in progress"
TAKEN_OVER = 2.0  # seconds: an answer this late is a charge's (the contract: two seconds longer than the lease)


@check(
    "live-run-never-taken-over",
    "a run slower than its lease is never taken over: every retry is in progress at once, until the replay",
    "MUST",
    ["S1", "S4", "WG1.3", "P18'"],
    needs="short_lease",
)
def live_run_never_taken_over(server: Server) -> dict:
    """At most once, for a tool slower than its lease. On a server whose lease is --short-lease seconds (or
    that has none: one process) and whose charge outlasts it by two seconds or more, the same request is
    sent every half second, past the lease, until the original answers: each is refused as in progress
    while the original still runs (none takes the key over, none waits for the run); other arguments
    under the key are a conflict; the original gets a result, the key replays it, and one charge was made."""
    key, before, lease = new_key(), server.count(), server.options.short_lease
    original, began = server.send_charge(100, key), time.monotonic()
    retries, changed, outcome = [], None, None
    while not server.answered(original):
        time.sleep(RETRY_EVERY)
        retry, sent_at = server.send_charge(100, key), time.monotonic() - began
        answer, waited = server.reply(retry), time.monotonic() - began - sent_at
        sent = f"the same request, sent {sent_at:.1f} s into a {lease:g} s lease while the original ran,"
        # At once: a run taken over, or a retry queued behind the run, is answered seconds later.
        expect(waited < TAKEN_OVER, f"{sent} was answered only {waited:.1f} s later: it took over or waited")
        if "result" in answer:  # sent as the original completed: its replay, whichever answer came first
            outcome = server.reply(original)
            expect(answer["result"] == outcome.get("result"), f"{sent} got a result unlike the original's: {answer}")
            break
        expect(error_type(answer) == IN_PROGRESS, f"{sent} was not refused as in progress: {answer}")
        retries.append(round(sent_at, 1))
        if changed is None and sent_at > lease:  # once, past the lease
            changed = server.charge(200, key)
            expect(error_type(changed) == CONFLICT, f"other arguments past the lease were not a conflict: {changed}")
    if changed is None:
        raise Inconclusive(
            f"the charge was answered within {time.monotonic() - began:.1f} s: the server named by "
            "--short-lease-command or --short-lease-url must charge for longer than its lease, by two seconds or more"
        )
    outcome = outcome if outcome is not None else server.reply(original)
    expect(succeeded(outcome), f"the original did not get a result: {outcome}")
    replay = server.charge(100, key)
    expect(replay.get("result") == outcome.get("result"), f"the key's replay, a result unlike the original's: {replay}")
    charges = server.count() - before
    expect(charges == 1, f"one keyed charge, retried past its lease, charged {charges} times")
    return {"in progress at": retries}


BOUND_SETTINGS = ("deadlineSeconds", "leaseSeconds")


def first_answer(server: Server, request_id, within: float) -> dict | None:
    """The answer to a request sent just now, if it comes within `within` seconds; else None."""
    waited_until = time.monotonic() + within
    while not server.answered(request_id):
        if time.monotonic() > waited_until:
            return None
        time.sleep(0.05)
    return server.reply(request_id)


@check(
    "in-progress-ends-by-the-deadline",
    "a keyed call that outlasts the advertised deadline is ended and its -32603 recorded: its key is in progress "
    "for no longer than deadlineSeconds + leaseSeconds",
    "MUST",
    ["S1", "S4", "P31"],
    needs="short_deadline",
)
def in_progress_ends_by_the_deadline(server: Server) -> dict:
    """A bound on "in progress". On a server that advertises deadlineSeconds D and leaseSeconds L, and whose
    charge takes longer than D + L by four seconds or more, the same request is sent every half second: none
    sent past D + L (and two seconds for the transport) may be refused as in progress. The run stopped at its
    deadline is recorded as a -32603 error outcome: the first retry not refused as in progress is answered with
    it, and other arguments under the key are then a conflict; a key given back, which runs them, breaks the rule."""
    where, settings = capability(server)
    bound = [settings.get(name) for name in BOUND_SETTINGS] if isinstance(settings, dict) else []
    if len(bound) != 2 or not all(positive_integer(value) for value in bound):
        raise Skipped(f"{where} advertises no {' and '.join(BOUND_SETTINGS)}: {settings!r}")
    deadline, lease = bound
    key, freed, outcome = new_key(), None, None
    original, began = server.send_charge(100, key), time.monotonic()
    while freed is None and time.monotonic() - began < deadline + lease + 2 * TAKEN_OVER:
        time.sleep(RETRY_EVERY)
        retry, sent_at = server.send_charge(100, key), time.monotonic() - began
        # Waited for until the bound has passed: a server that holds a retry until the run ends (a queue, which
        # other checks catch) answers it with the stopped run's outcome, however late the deadline's record lands.
        answer = first_answer(server, retry, max(TAKEN_OVER, deadline + lease + TAKEN_OVER - sent_at))
        if answer is None or error_type(answer) != IN_PROGRESS:
            freed, outcome = round(sent_at, 1), answer
            break
        expect(
            sent_at < deadline + lease + TAKEN_OVER,
            f"the same request, sent {sent_at:.1f} s after the original, was refused as in progress: past "
            f"deadlineSeconds ({deadline}) + leaseSeconds ({lease}), the key must no longer be in progress",
        )
    if server.answered(original) and succeeded(server.reply(original)):
        raise Inconclusive(
            f"the charge succeeded within {time.monotonic() - began:.1f} s: the server named by "
            "--short-deadline-command or --short-deadline-url must charge for longer than deadlineSeconds + "
            "leaseSeconds, by four seconds or more"
        )
    # A -32603 alone does not tell a replay from a run anew that hit its own deadline: the key's record does, a
    # completed one making other arguments under the key a conflict, where a key given back runs them.
    recorded = outcome is not None and (outcome.get("error") or {}).get("code") == INTERNAL_ERROR
    other = server.charge(200, key) if recorded else None
    expect(
        recorded and error_type(other) == CONFLICT,
        f"the run stopped at its deadline was not recorded as a -32603 outcome: the same request, sent {freed} s "
        f"after the original, got {'no answer by the bound (it ran again)' if outcome is None else outcome}; other "
        f"arguments under the key got {other if other is not None else '(not sent)'}",
    )
    return {"deadlineSeconds": deadline, "leaseSeconds": lease, "freed at": freed}


# --- bad input ----------------------------------------------------------------


@check(
    "malformed-input-survived",
    "broken messages charge nothing, claim no key, and the server serves on",
    "POSITION",
    ["S0", "P2"],
)
def malformed_input_survived(server: Server) -> dict:
    """Not JSON, truncated JSON with a key, jsonrpc 1.0, params as an array, a keyed call without a tool name
    or without an id: after each the server answers, nothing was charged, and the key works once."""
    key, before = new_key(), server.count()
    good = server.spelled("bad", "tools/call", charge_members(server, '{"amount":100}') + f',"idempotencyKey":"{key}"')
    bad_lines = [
        "charge 100 to order-1",
        good[:-2],
        good.replace('"jsonrpc":"2.0"', '"jsonrpc":"1.0"'),
        good.replace('"params":{', '"params":[{', 1) + "]",
        good.replace(f'"name":{json.dumps(server.options.charge_tool)},', ""),
        good.replace('"id":"bad",', ""),
    ]
    for line in bad_lines:
        server.send_text(line, None)
    expect(server.alive(), "the server stopped answering")
    expect(server.count() == before, f"broken messages charged {server.count() - before} times")
    first, again = server.charge(100, key), server.charge(100, key)
    expect(succeeded(first) and again.get("result") == first["result"], f"the key is no longer usable: {first}")
    expect(server.count() == before + 1, "the key ran more than once")


# --- P20: revisions -------------------------------------------------------------


@check(
    "replay-across-revisions",
    "a key recorded on 2026-07-28 replays its outcome to a 2025-11-25 retry",
    "POSITION",
    ["S2", "L1", "P20"],
)
def replay_across_revisions(server: Server) -> dict:
    """One server speaking both revisions keeps one key space: the retry in the other revision is a replay,
    reshaped as that revision's result."""
    if server.opening["revision"] != MODERN or not isinstance(server.connection, Http):
        raise Skipped("needs a server that speaks 2026-07-28 over HTTP, where a retry may use another revision")
    key, before = new_key(), server.count()
    original = server.charge(100, key)
    server.connection.revision = HANDSHAKE
    try:
        replay = server.charge(100, key)
    finally:
        server.connection.revision = MODERN
    expect(server.count() == before + 1, "the retry in the other revision ran the tool again")
    expect(replay.get("result", {}).get("content") == original["result"]["content"], f"the retry: {replay}")


# --- P24, P25: a task handle, an input-required answer (2026-07-28) ---------------


def of_the_modern_revision(server: Server, what: str) -> None:
    """NotApplicable unless the server was spoken to on 2026-07-28, the only revision that defines `what`."""
    if server.opening["revision"] != MODERN:
        raise NotApplicable(f"{what} is {MODERN}'s; the server was spoken to on {server.opening['revision']}")


def task_call(server: Server, key: str) -> dict:
    """A keyed charge from a client that declares the tasks extension, as SEP-2663 asks of each request."""
    return server.call(server.options.charge_tool, server.charge_arguments(100), key, _meta=DECLARES_TASKS)


def task_id(response: dict):
    """The task id of a CreateTaskResult (resultType "task"), or None for any other answer."""
    result = response.get("result") or {}
    return result.get("taskId") if result.get("resultType") == "task" else None


def finished_task(server: Server, handle: str) -> dict:
    """Poll tasks/get, as a client does (over HTTP with Mcp-Name: the task id), until the task has finished."""
    deadline = time.monotonic() + server.options.timeout
    while True:
        answer = server.request("tasks/get", {"taskId": handle, "_meta": DECLARES_TASKS})
        task = answer.get("result")
        expect(isinstance(task, dict), f"tasks/get of the key's task {handle} failed: {answer}")
        if task.get("status") in TASK_FINISHED:
            return task
        expect(time.monotonic() < deadline, f"the key's task {handle} did not finish in {server.options.timeout:g} s")
        time.sleep(min(max(task.get("pollIntervalMs") or 100, 50), 1000) / 1000)


@check(
    "task-handle-replayed",
    "a keyed call answered with a task gets the same task handle on its retry: one task, one run",
    "MUST",
    ["S0", "S2", "L7", "P24"],
)
def task_handle_replayed(server: Server) -> dict:
    """SEP-2663 (the tasks extension of 2026-07-28) has the server mint the task id, so a client whose
    CreateTaskResult was lost sends the same call again. Under one key, that retry is the same request (_meta, where
    the extension is declared, is not compared): it must get the handle the call produced (S2), not a second task,
    while the task works and after it has finished, and the tool runs once (S0). The kit sees no task list: one
    handle for every retry and one charge are what a client can see of "one task". Not applicable to a server that
    declares no tasks extension, which answers no call with a task."""
    of_the_modern_revision(server, "the tasks extension")
    if not isinstance((server.opening["capabilities"].get("extensions") or {}).get(TASKS), dict):
        raise NotApplicable(f"the server declares no tasks extension (capabilities.extensions[{TASKS}])")
    key, before = new_key(), server.count()
    first = task_call(server, key)
    expect("error" not in first, f"the keyed charge that declares the tasks extension was refused: {first}")
    handle = task_id(first)
    if handle is None:
        raise PartlyRun(
            "a lost task handle under a key (L7, P24)",
            "give --charge-tool a tool the server runs as a task",
            f"the server declares {TASKS}, but answered the charge tool at once: {json.dumps(first)[:160]}",
        )
    resent = task_call(server, key)  # the CreateTaskResult was lost: the very same call again
    expect(task_id(resent) == handle, f"the retry did not get the task handle {handle}: {json.dumps(resent)[:300]}")
    task = finished_task(server, handle)
    expect(task["status"] == "completed", f"the key's task ended {task['status']}: {json.dumps(task)[:300]}")
    later = task_call(server, key)
    expect(task_id(later) == handle, f"once the task had finished, the retry got {json.dumps(later)[:300]}")
    expect(server.count() == before + 1, f"one keyed task call and two retries charged {server.count() - before} times")
    return {"taskId": handle}


def asks_for_input(response: dict) -> bool:
    """Is this answer an input-required result (2026-07-28: resultType "input_required")?"""
    return (response.get("result") or {}).get("resultType") == "input_required"


PLAIN_ANSWERS = {"boolean": True, "integer": 1, "number": 1, "string": "yes"}


def plain_answer(field: dict):
    """What a user who says yes puts in a form field: its enum's first value, else a plain value of its type."""
    return (field.get("enum") or [PLAIN_ANSWERS.get(field.get("type"), "yes")])[0]


def input_responses(server: Server, question: dict) -> dict:
    """The client's answers to an input-required result: each form elicitation accepted, every field filled with a
    plain value (an enum's first), as a user who says yes would; the kit answers no other kind of request."""
    responses = {}
    for name, request in ((question.get("result") or {}).get("inputRequests") or {}).items():
        if request.get("method") != "elicitation/create":
            raise PartlyRun(
                "an input-required answer under a key (E8, P25)",
                "give --input-required-tool a tool whose questions are form elicitations",
                f"{server.options.input_required_tool} asked {request.get('method')!r}, which the kit cannot answer",
            )
        schema = (request.get("params") or {}).get("requestedSchema") or {}
        content = {field: plain_answer(spec) for field, spec in (schema.get("properties") or {}).items()}
        responses[name] = {"action": "accept", "content": content}
    return responses


@check(
    "input-required-never-replayed",
    "an input-required answer is never kept as the key's outcome: the keyed continuation runs, once",
    "POSITION",
    ["E8", "L3", "L4", "P25"],
)
def input_required_never_replayed(server: Server) -> dict:
    """P25: a keyed call of the tool named by --input-required-tool is asked a question (an input-required result,
    2026-07-28); the same keyed call again is asked again, nothing run. A question replayed from a record is not
    told apart from a fresh one on the wire (its requestState may be resealed on each answer), so the continuation
    tells: under the same key, with the same arguments, inputResponses and the echoed requestState, it must run and
    charge, not get the question back; and its retry, after a lost answer, replays the charge without charging
    again. Not applicable without --input-required-tool: the kit cannot know which tool of a server asks first."""
    tool = server.options.input_required_tool
    if tool is None:
        raise NotApplicable("no tool that asks for input first was named (--input-required-tool)")
    of_the_modern_revision(server, "an input_required result")
    untested = "an input-required answer under a key (E8, P25)"
    if tool not in server.tools:
        raise PartlyRun(untested, "give --input-required-tool a tool the server lists", f"it lists no {tool}")
    key, before, arguments = new_key(), server.count(), server.charge_arguments(100)
    asked = server.call(tool, arguments, key)
    if not asks_for_input(asked):
        raise PartlyRun(untested, "give --input-required-tool a tool that asks first", f"{tool} answered {asked}")
    again = server.call(tool, arguments, key)
    expect(asks_for_input(again), f"the same keyed call, sent again, was not asked again: {json.dumps(again)[:300]}")
    expect(server.count() == before, "a keyed call that was only asked a question charged")
    continuation = {"inputResponses": input_responses(server, again)}
    if "requestState" in again["result"]:
        continuation["requestState"] = again["result"]["requestState"]
    charged = server.call(tool, arguments, key, **continuation)
    expect(
        not asks_for_input(charged),
        "the keyed continuation got the question back: the question was kept as the key's outcome and replayed",
    )
    expect(
        succeeded(charged) and server.count() == before + 1,
        f"the keyed continuation did not charge once ({server.count() - before} charges): {json.dumps(charged)[:300]}",
    )
    retried = server.call(tool, arguments, key, **continuation)  # the charging leg's answer was lost
    expect(server.count() == before + 1, "the keyed continuation's retry charged again")
    expect(retried.get("result") == charged["result"], f"the keyed continuation's retry differs: {retried}")
    return {"tool": tool}


# --- K1-K3, P21, P22: whose key it is (a server behind authorisation) -----------


def kind_of(response: dict) -> tuple:
    """An answer apart from what any two calls differ in (ids, keys, the tool's text): its error, or a result."""
    if "error" in response:
        return "error", response["error"].get("code"), error_type(response)
    return "result", bool(response.get("result", {}).get("isError"))


@check(
    "key-scoped-to-principal",
    "another principal's call under a used key runs anew; each principal's retry replays its own result",
    "MUST",
    ["K1", "K2", "P21"],
)
def key_scoped_to_principal(server: Server) -> dict:
    """Records are scoped to the authorisation boundary: a key only matches earlier requests of the same
    principal, and holding someone's key is no authority to read their result."""
    other = server.as_other("second_bearer")
    key, before = new_key(), server.count()
    first = server.charge(100, key)
    expect(succeeded(first), f"the first principal's keyed charge failed: {first}")
    theirs = other.charge(100, key)
    expect(
        server.count() == before + 2, f"the second principal's call under the first's key did not run: it got {theirs}"
    )
    expect(
        other.charge(100, key).get("result") == theirs.get("result"),
        "the second principal's retry did not replay its own result",
    )
    expect(
        server.charge(100, key).get("result") == first["result"],
        "the first principal's retry no longer replays its own result",
    )
    expect(server.count() == before + 2, "a retry ran the tool again")


@check(
    "other-principals-key-no-conflict",
    "another principal's use of a key never makes it a conflict",
    "MUST",
    ["K2", "P21"],
)
def other_principals_key_no_conflict(server: Server) -> dict:
    """The second principal sends other arguments under the first's completed key: its answer is what a
    never-used key gives (apart from ids and the tool's text), never a conflict, and the tool runs."""
    other = server.as_other("second_bearer")
    key, before = new_key(), server.count()
    server.charge(100, key)
    used, unused = other.charge(200, key), other.charge(200, new_key())
    expect(kind_of(used) == kind_of(unused), f"under the first principal's key: {used}; under a new key: {unused}")
    expect(server.count() == before + 3, f"three charges ran {server.count() - before} times")


@check(
    "other-principals-key-not-in-progress",
    "another principal's running call never makes a key in progress",
    "MUST",
    ["K2", "P21"],
    needs="slow",
)
def other_principals_key_not_in_progress(server: Server) -> dict:
    """While the first principal's keyed call runs, the second sends the same call under the same key: its
    answer is what a never-used key gives, never an in-progress error, and both calls run."""
    other = server.as_other("second_bearer")
    key, before = new_key(), server.count()
    running = slow_call(server, 100, key)
    used, unused = other.send_charge(100, key), other.send_charge(100, new_key())
    used, unused = other.reply(used), other.reply(unused)
    server.reply(running)
    expect(kind_of(used) == kind_of(unused), f"under the running key: {used}; under a new key: {unused}")
    expect(server.count() == before + 3, f"three charges ran {server.count() - before} times")


@check(
    "replay-rechecks-authorisation",
    "a retry whose token lost the tool's scope gets no recorded result",
    "MUST",
    ["K1", "K3", "P22"],
)
def replay_rechecks_authorisation(server: Server) -> dict:
    """A replay passes the authorisation in force when it is made: the same principal, retrying with a token
    narrowed since, is refused and sees nothing of the record; the record stays for a token that may."""
    narrowed = server.as_other("narrowed_bearer")
    key, before = new_key(), server.count()
    original = server.charge(100, key)
    refused = narrowed.charge(100, key)
    expect(
        not succeeded(refused) and refused.get("result") != original["result"],
        f"the narrowed token got an answer: {refused}",
    )
    expect(server.charge(100, key).get("result") == original["result"], "the record is gone after the refusal")
    expect(server.count() == before + 1, f"one key ran {server.count() - before} times")
    return {"refused": refused}


# ----------------------------------------------------------------------------
# 4. Running the checks: results, baseline, output
# ----------------------------------------------------------------------------

# What every check stands on: the server opens (server/discover or initialize), lists the fixture contract's
# tools, and they work (fixture_works). When they do not, this is the run's one FAILURE, of no rule of the SEP
# (its severity says FIXTURE), the checks are not run, and the run exits 2.
FIXTURE = Check(
    "sep-3182-fixture-contract",
    "the server opens, lists the fixture contract's tools, and they work",
    "FIXTURE",
    [],
    "main",
    lambda server: None,
)

VARIANTS = {
    "main": "",
    "slow": "slow_",
    "short_retention": "short_retention_",
    "bounded": "bounded_",
    "short_lease": "short_lease_",
    "short_deadline": "short_deadline_",
}
WHAT_VARIANT = {
    "slow": "a server whose charge takes at least two seconds (--slow-command or --slow-url)",
    "short_retention": "a server whose retention window is --short-retention seconds "
    "(--short-retention-command or --short-retention-url)",
    "bounded": "a server that holds at most --max-records records (--bounded-command or --bounded-url)",
    "short_lease": "a server whose lease on a running record is --short-lease seconds (or none: one process) and "
    "whose charge takes two seconds longer (--short-lease-command or --short-lease-url)",
    "short_deadline": "a server that advertises deadlineSeconds and leaseSeconds and whose charge takes four seconds "
    "longer than both together (--short-deadline-command or --short-deadline-url)",
}


def connect(options, variant: str) -> Connection | None:
    """A connection to the server a variant names, or None when the command line names none."""
    prefix = VARIANTS[variant]
    command, url = getattr(options, f"{prefix}command"), getattr(options, f"{prefix}url")
    connection = (
        Http(url, options.timeout, options.headers) if url else Stdio(command, options.timeout) if command else None
    )
    if connection is not None:
        connection.placement, connection.tool_arguments = options.placement or "params", options.tool_arguments
    return connection


def result(check: Check, status: str, details: dict | None = None, error: str | None = None) -> dict:
    """One entry of checks.json, in the official suite's shape."""
    entry = {
        "id": check.id,
        "name": check.name,
        "description": check.description,
        "status": status,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        "specReferences": [{"id": f"SEP-3182 {row}", "url": SPEC_URL} for row in check.rows],
        "details": {"severity": check.severity, **(details or {})},
    }
    if error is not None:
        entry["errorMessage"] = error
    return entry


def run_one(check: Check, server: Server) -> dict:
    """Run one check: SUCCESS, FAILURE (WARNING for SHOULD and POSITION), SKIPPED, or WARNING if inconclusive."""
    try:
        details = check.run(server) or {}
        return result(check, "SUCCESS", details)
    except NotRun as why:
        return result(check, "SKIPPED", {"credential": why.credential}, error=str(why))
    except PartlyRun as why:
        return result(check, "SKIPPED", {"untested": why.untested, "option": why.option}, error=str(why))
    except NotApplicable as why:
        return result(check, "SKIPPED", {"applicable": False}, error=f"not applicable: {why}")
    except Skipped as why:
        return result(check, "SKIPPED", error=str(why))
    except (Inconclusive, ShouldUnmet) as why:
        return result(check, "WARNING", error=str(why))
    except Failed as why:
        return result(check, "FAILURE" if check.severity == "MUST" else "WARNING", error=str(why))
    except (OSError, TimeoutError, ValueError, KeyError, TypeError, http.client.HTTPException) as broken:
        status = "FAILURE" if check.severity == "MUST" else "WARNING"
        return result(check, status, error=f"{type(broken).__name__}: {broken}")


def run_checks(options, checks: list) -> list:
    """Run the chosen checks, each variant's on a server of its own (a fresh process where the kit starts it)."""
    results, unopened, not_run = [], {}, 0  # unopened: variant -> why its server could not be used
    probed = False  # the fixture is tried on the first server that opens: the same tools and arguments serve all

    def report(entry: dict) -> None:
        results.append(entry)
        print(line_for(entry), flush=True)

    for variant in VARIANTS:
        chosen = [check for check in checks if check.needs == variant]
        connection = connect(options, variant) if chosen else None
        if connection is None:
            for check in chosen:
                report(result(check, "SKIPPED", error=f"needs {WHAT_VARIANT[variant]}"))
            continue
        try:
            server = Server(connection, options)
            if not probed:
                fixture_works(server)
                probed = True
        except (FixtureBroken, OSError, TimeoutError, ValueError, KeyError, http.client.HTTPException) as broken:
            connection.close()
            unopened[variant], not_run = str(broken), not_run + len(chosen)
            for check in chosen:  # in checks.json, each one's status; the run's one FAILURE says why
                results.append(
                    result(
                        check,
                        "SKIPPED",
                        error=f"not run: the {variant} server could not be used (sep-3182-fixture-contract)",
                    )
                )
            continue
        try:
            for check in chosen:
                report(run_one(check, server))
        finally:
            connection.close()
    if unopened:
        report(fixture_failure(unopened, not_run))
    return results


def fixture_failure(unopened: dict, not_run: int) -> dict:
    """The run's one FAILURE for every server that could not be opened or whose fixture does not work: which, why
    (each reason said once), and how many checks did not run. It is no rule of the SEP: the run exits 2."""
    reasons = {why: [variant for variant in unopened if unopened[variant] == why] for why in unopened.values()}
    said = "; ".join(
        f"the {' and '.join(variants)} server{'s' * (len(variants) > 1)}: {why}" for why, variants in reasons.items()
    )
    return result(
        FIXTURE,
        "FAILURE",
        {"servers": unopened, "notRun": not_run},
        error=f"could not use {said} ({not_run} checks not run)",
    )


def line_for(entry: dict) -> str:
    """One line per check."""
    line = f"{entry['status']:<8} {entry['id']}: {entry['name']}"
    return line if "errorMessage" not in entry else f"{line} -- {entry['errorMessage'][:300]}"


def read_baseline(path: Path) -> set:
    """The ids of an expected-failures file (the official suite's YAML: a `server:` list; `scenario:id` read as id)."""
    ids = set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("- "):
            ids.add(line[2:].strip().strip("'\"").rsplit(":", 1)[-1])
    return ids


# 2 is argparse's, an unknown --check's, and the fixture contract's: the command line, or the server it names, is
# not what the kit was told; no rule of the SEP was found broken.
FAILED_RUN, WRONG_SETUP, NOT_ALL_TESTED = 1, 2, 3


def exit_status(results: list, baseline: set) -> tuple[int, list]:
    """The official suite's rules: an unexpected failure, or a baselined check that now passes, fails the run (1).
    Else a check SKIPPED and not baselined makes it 3: nothing failed, but the run claims no full conformance.
    Before either: a fixture that does not work makes it 2, whatever the baseline, as a wrong command line does."""
    if any(entry["id"] == FIXTURE.id and entry["status"] == "FAILURE" for entry in results):
        return WRONG_SETUP, [f"the fixture does not work ({FIXTURE.id}): no rule of the SEP was tested there"]
    problems = []
    for entry in results:
        if entry["status"] == "FAILURE" and entry["id"] not in baseline:
            problems.append(f"regression: {entry['id']} failed and is not in the expected failures")
        if entry["status"] in ("SUCCESS", "WARNING") and entry["id"] in baseline:
            problems.append(f"stale baseline: {entry['id']} passes now; remove it from the expected failures")
    if problems:
        return FAILED_RUN, problems
    untested = any(not_tested(entry) and entry["id"] not in baseline for entry in results)
    return (NOT_ALL_TESTED if untested else 0), problems


def applicable(entry: dict) -> bool:
    """Does the check's rule bind this server? (NotApplicable: it offers no tasks, or names no tool that asks.)"""
    return (entry.get("details") or {}).get("applicable", True)


def not_tested(entry: dict) -> bool:
    """SKIPPED for want of something the kit needed (a server, a credential, a tool), not because no rule applied."""
    return entry["status"] == "SKIPPED" and applicable(entry)


def load_requirements(path: Path) -> dict:
    """Read sep-3182.yaml: the small subset of YAML it is written in (see its opening comment)."""
    document, item = {"requirements": []}, None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#") or raw.strip() == "requirements:":
            continue
        name, sep, value = raw.strip().removeprefix("- ").partition(":")
        value = value.strip()
        if not sep:
            raise ValueError(f"{path}:{number}: expected 'key: value'")
        if value.startswith("'"):
            if not value.endswith("'") or len(value) < 2:
                raise ValueError(f"{path}:{number}: an unclosed quote")
            value = value[1:-1].replace("''", "'")
        if raw.lstrip().startswith("- "):
            item = {}
            document["requirements"].append(item)
        (item if raw.startswith(" ") else document)[name] = value
    return document


def header(text: str) -> tuple[str, str]:
    """A --header 'Name: value'."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def tool_arguments(text: str) -> dict:
    """A --tool-arguments JSON object."""
    try:
        value = json.loads(text)
    except ValueError as bad:
        raise argparse.ArgumentTypeError(f"not JSON ({bad}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_argument_group("the server under test (one of)")
    target.add_argument("--command", help="start this command and speak to it over stdio")
    target.add_argument("--url", help="speak Streamable HTTP to this running endpoint")
    variants = parser.add_argument_group("servers for the rows that need one (each check is SKIPPED without)")
    for variant, prefix in list(VARIANTS.items())[1:]:
        flag = prefix.replace("_", "-")
        variants.add_argument(f"--{flag}command", metavar="CMD", help=f"stdio: {WHAT_VARIANT[variant]}")
        variants.add_argument(f"--{flag}url", metavar="URL", help="HTTP: the same, already running")
    variants.add_argument(
        "--short-retention",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the window of the short-retention server (default: 1)",
    )
    variants.add_argument(
        "--max-records", type=int, default=3, metavar="N", help="the bound of the bounded server (default: 3)"
    )
    variants.add_argument(
        "--short-lease",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the lease of the short-lease server (default: 1)",
    )
    contract = parser.add_argument_group("the fixture contract (README.md)")
    contract.add_argument("--charge-tool", default="charge_guarded", help="the tool with a counted side effect")
    contract.add_argument("--amount-argument", default="amount", help="its positive integer argument")
    contract.add_argument("--refused-amount", type=int, default=0, help="an amount it refuses (default: 0)")
    contract.add_argument("--count-tool", default="get_balance", help="the tool that reads the count")
    contract.add_argument("--count-field", default="charges", help="the count's member in that tool's JSON")
    contract.add_argument("--other-tool", default="charge_unguarded", help="another tool taking the same arguments")
    contract.add_argument(
        "--tool-arguments",
        type=tool_arguments,
        default={},
        metavar="JSON",
        help="a JSON object merged into the arguments of every call the kit makes to the tools above (an account, "
        "a currency); on a clash the kit's own members (the amount, note) win",
    )
    contract.add_argument(
        "--input-required-tool",
        metavar="NAME",
        help="a tool taking the same arguments that asks for input (input_required, 2026-07-28) before it charges",
    )
    parser.add_argument(
        "--revision",
        choices=["auto", MODERN, HANDSHAKE],
        default="auto",
        help="auto: server/discover on 2026-07-28, else the 2025-11-25 handshake",
    )
    parser.add_argument(
        "--placement",
        choices=["params", "meta"],
        default=None,
        help=f"where the key goes (P26): params.idempotencyKey and capabilities.tools.idempotency (the SEP's "
        f"field), or _meta[{META_KEY}] and capabilities.extensions[{EXTENSION_ID}] (an extension); by default, "
        "where the server advertises it",
    )
    parser.add_argument("--timeout", type=float, default=15, help="seconds to wait for one answer (default: 15)")
    parser.add_argument(
        "--settle", type=float, default=0.5, help="seconds between a slow call and its duplicate (default: 0.5)"
    )
    parser.add_argument("--bearer", metavar="TOKEN", help="HTTP: send Authorization: Bearer TOKEN")
    parser.add_argument(
        "--header",
        type=header,
        action="append",
        default=[],
        metavar="'Name: value'",
        help="HTTP: send this header with every request (repeatable)",
    )
    parser.add_argument(
        "--second-bearer",
        metavar="TOKEN",
        help="HTTP: a second principal's token, for the checks of keys across principals (K2)",
    )
    parser.add_argument(
        "--narrowed-bearer",
        metavar="TOKEN",
        help="HTTP: the --bearer principal's token without "
        "the charge tool's scope, for the check of a replay's authorisation (K3)",
    )
    parser.add_argument("--check", action="append", metavar="ID", help="run only this check (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--json", metavar="FILE", help="write the results as checks.json")
    parser.add_argument("--expected-failures", metavar="FILE", help="a baseline of checks expected to fail")
    options = parser.parse_args(argv)
    options.headers = dict(options.header)
    if options.bearer:
        options.headers["Authorization"] = f"Bearer {options.bearer}"
    if not options.list and bool(options.command) == bool(options.url):
        parser.error("name the server under test with exactly one of --command and --url")
    return options


def main(argv=None) -> int:
    options = parse_args(argv)
    if options.list:
        for check in CHECKS:
            print(f"{check.id}  [{check.severity}; {', '.join(check.rows)}; {check.needs} server]  {check.name}")
        return 0
    unknown = set(options.check or []) - {check.id for check in CHECKS}
    if unknown:
        print(f"no such check: {', '.join(sorted(unknown))} (--list shows them)", file=sys.stderr)
        return WRONG_SETUP
    checks = [check for check in CHECKS if not options.check or check.id in options.check]
    results = run_checks(options, checks)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    baseline = read_baseline(Path(options.expected_failures)) if options.expected_failures else set()
    status, problems = exit_status(results, baseline)
    for problem in problems:
        print(problem)
    rules = [entry for entry in results if entry["id"] != FIXTURE.id]  # the fixture's failure is no rule's
    tally = {name: sum(entry["status"] == name for entry in rules) for name in ("SUCCESS", "FAILURE", "WARNING")}
    skipped = sum(not_tested(entry) for entry in rules)
    inapplicable = sum(not applicable(entry) for entry in rules)
    broken = "; the fixture does not work (its checks not run)" if len(rules) < len(results) else ""
    print(
        f"sep-3182: {tally['SUCCESS']} passed, {tally['FAILURE']} failed, {tally['WARNING']} warnings, "
        f"{skipped} skipped{f', {inapplicable} not applicable' if inapplicable else ''}{not_run(results)}{broken}"
    )
    return status


def not_run(results: list) -> str:
    """The summary's word on what was not tested: the authorisation checks skipped for want of a credential,
    then the rows of checks that ran only in part (each named once)."""
    wanting = {entry["details"]["credential"] for entry in results if "credential" in entry["details"]}
    said = [
        f"; {untested} NOT tested (give {option})"
        for credential, (option, _, untested) in CREDENTIALS.items()
        if credential in wanting
    ]
    for entry in results:
        if "untested" in entry["details"]:
            line = f"; {entry['details']['untested']} NOT tested ({entry['details']['option']})"
            said += [] if line in said else [line]
    return "".join(said)


if __name__ == "__main__":
    sys.exit(main())
