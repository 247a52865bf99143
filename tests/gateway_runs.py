"""The gateways a call may pass through on its way to the server, each installed from its registry, and what each
keeps of the extension: the key, the capability, a rejection's data and a result's `_meta`.

    direct              no gateway: the raw client speaks to the server's Streamable HTTP
    fastmcp proxy       fastmcp's `create_proxy` (tests/gateways/fastmcp_proxy.py), Streamable HTTP front and back
    mcp-proxy, HTTP     PyPI's mcp-proxy: a Streamable HTTP front, the server spawned on stdio
    mcp-proxy, stdio    the same: a stdio front, the server over Streamable HTTP
    mcp-remote          npm's mcp-remote: a stdio front, the server over Streamable HTTP (--transport http-only)

Each environment is made from the project's files: .venv-gateways/NAME from tests/gateways/NAME.txt, every package
pinned, and tests/gateways/node_modules from its package-lock.json. The client is raw JSON-RPC (tests/wire.py) on
the 2025 handshake, which every gateway speaks, and it puts the key exactly where the placement says; whether the key
arrived is the server's word (its log's claimed and replayed lines, and get_balance), never the client's.
"""

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from kit_targets import http_servers
from node_packages import npm_installed, one_at_a_time
from wire import REPLY_TIMEOUT, SDK2_SERVER, HttpWire, StdioWire, Wire, free_port, new_key, sdk2_python

from mcp_idempotency.rules import ACKNOWLEDGEMENT, ARGUMENT_MARK, EXTENSION_ID, META_KEY, acknowledgement

ROOT = Path(__file__).resolve().parent.parent
GATEWAYS = ROOT / "tests" / "gateways"
ENVIRONMENTS = ROOT / ".venv-gateways"
MCP_REMOTE = GATEWAYS / "node_modules" / "mcp-remote" / "dist" / "proxy.js"
HANDSHAKE = "2025-06-18"  # the revision every gateway measured speaks, front and back
TOOL = "charge_guarded"
PLACEMENTS = ("meta", "params", "argument")
CHARGE_DELAY = 2.0  # seconds: long enough for a second call to find the first still running
KEY_ARGUMENT = "idempotency_key"
READY_SECONDS = 60  # a gateway and the server behind it start at once, each importing an SDK


def gateway_python(name: str) -> Path:
    """The interpreter of .venv-gateways/NAME, made from tests/gateways/NAME.txt, or made again when the file
    changed since (a copy of the pins it was made from is kept beside it)."""
    folder, pins = ENVIRONMENTS / name, GATEWAYS / f"{name}.txt"
    python, made_from = folder / "bin" / "python", folder / "made-from.txt"
    ENVIRONMENTS.mkdir(exist_ok=True)
    with one_at_a_time(ENVIRONMENTS):
        if not made_from.exists() or made_from.read_text() != pins.read_text():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
            install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(pins)]
            subprocess.run(install, check=True, timeout=600)
            shutil.copyfile(pins, made_from)
    return python


def pinned(pins: str, package: str) -> str:
    """The version tests/gateways/PINS.txt pins `package` at."""
    found = re.search(rf"^{re.escape(package)}==(\S+)$", (GATEWAYS / f"{pins}.txt").read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"tests/gateways/{pins}.txt pins no {package}")
    return found[1]


def locked(package: str) -> str:
    """The version tests/gateways/package-lock.json installs `package` at."""
    return json.loads((GATEWAYS / "package-lock.json").read_text())["packages"][f"node_modules/{package}"]["version"]


def versions() -> dict[str, str]:
    """Each gateway and the SDK under it, as its pins install them (mcp-remote bundles its SDK at build time)."""
    npm_installed(GATEWAYS)
    bundled = json.loads((MCP_REMOTE.parent.parent / "package.json").read_text())["devDependencies"]
    return {
        "fastmcp proxy": f"fastmcp {pinned('fastmcp', 'fastmcp')} (mcp {pinned('fastmcp', 'mcp')})",
        "mcp-proxy": f"mcp-proxy {pinned('mcp-proxy', 'mcp-proxy')} (mcp {pinned('mcp-proxy', 'mcp')})",
        "mcp-remote": f"mcp-remote {locked('mcp-remote')} (bundles @modelcontextprotocol/client "
        f"{bundled['@modelcontextprotocol/client']})",
    }


def server_command(placement: str, log: Path, *options: str) -> list[str]:
    """The ledger server in `placement`, its decisions appended to `log` wherever it runs: a gateway that spawns it
    gives it no environment of ours, and may keep its stderr, so the file is named in the command itself."""
    server = [sdk2_python(), *SDK2_SERVER, "--verbose", "--store", "memory", "--placement", placement, *options]
    return ["/bin/sh", "-c", f'exec "$0" "$@" 2>>{shlex.quote(str(log))}', *server]


class HandshakeHttpWire(HttpWire):
    """A Streamable HTTP front after the 2025 initialize handshake, its session (if it keeps one) on every request."""

    ready_seconds = READY_SECONDS

    def __init__(self, target: str, command: list[str], port: int):
        super().__init__(target, command, port, revision=HANDSHAKE)

    def ready(self) -> None:
        self._wait_until_listening()
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params()}
        _, headers, body = self.post(json.dumps(initialize).encode(), self.headers(initialize))
        session = {name.lower(): value for name, value in headers.items()}.get("mcp-session-id")
        if session is not None:
            self.extra_headers["Mcp-Session-Id"] = session
        self.capabilities = json.loads(body)["result"]["capabilities"]
        self.notify("notifications/initialized")


class HandshakeStdioWire(StdioWire):
    """A stdio front after the 2025 initialize handshake, on the revision every gateway measured speaks."""

    def ready(self) -> None:
        super().ready()
        # The gateway connects to the server behind it before it answers: as slow as a start.
        answer = self.reply(self.send_request("initialize", initialize_params()), timeout=READY_SECONDS)
        self.capabilities = answer["result"]["capabilities"]
        self.notify("notifications/initialized")


def initialize_params() -> dict:
    """The 2025 handshake's request, from a raw client."""
    return {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


@contextmanager
def speaking(wire: Wire) -> Iterator[Wire]:
    """`wire` until the block ends, then closed."""
    try:
        yield wire
    finally:
        wire.close()


@contextmanager
def http_front(name: str, command: Callable[[int], list[str]]) -> Iterator[Wire]:
    """A process listening on a free port (`command` given the port) spoken to over Streamable HTTP."""
    port = free_port()
    with speaking(HandshakeHttpWire(name, command(port), port)) as wire:
        yield wire


@contextmanager
def behind_http(server: list[str]) -> Iterator[str]:
    """The server over Streamable HTTP while the block runs; its URL."""
    with http_servers([server]) as (url,):
        yield url


@contextmanager
def direct(server: list[str]) -> Iterator[Wire]:
    """No gateway."""
    with http_front("direct", lambda port: [*server, "--transport", "http", "--port", str(port)]) as wire:
        yield wire


@contextmanager
def fastmcp_proxy(server: list[str]) -> Iterator[Wire]:
    """fastmcp's create_proxy, Streamable HTTP on both sides."""
    script = [str(gateway_python("fastmcp")), str(GATEWAYS / "fastmcp_proxy.py")]
    with behind_http(server) as url, http_front("fastmcp proxy", lambda port: [*script, url, "--port", str(port)]) as w:
        yield w


def mcp_proxy() -> str:
    """mcp-proxy's command, as its environment installs it."""
    return str(gateway_python("mcp-proxy").parent / "mcp-proxy")


@contextmanager
def mcp_proxy_http_front(server: list[str]) -> Iterator[Wire]:
    """mcp-proxy serving Streamable HTTP, the server its stdio child."""
    with http_front("mcp-proxy, HTTP", lambda port: [mcp_proxy(), "--port", str(port), "--", *server]) as wire:
        yield wire


@contextmanager
def mcp_proxy_stdio_front(server: list[str]) -> Iterator[Wire]:
    """mcp-proxy on stdio, the server over Streamable HTTP."""
    with behind_http(server) as url:
        command = [mcp_proxy(), url, "--transport", "streamablehttp"]
        with speaking(HandshakeStdioWire("mcp-proxy, stdio", command)) as wire:
            yield wire


@contextmanager
def mcp_remote(server: list[str]) -> Iterator[Wire]:
    """mcp-remote on stdio, the server over Streamable HTTP; its OAuth folder a temporary one (none is needed)."""
    npm_installed(GATEWAYS)
    with behind_http(server) as url, tempfile.TemporaryDirectory() as auth:
        command = ["env", f"MCP_REMOTE_CONFIG_DIR={auth}", "node", str(MCP_REMOTE), url, "--transport", "http-only"]
        with speaking(HandshakeStdioWire("mcp-remote", command)) as wire:
            yield wire


ROUTES: dict[str, Callable[[list[str]], AbstractContextManager[Wire]]] = {
    "direct": direct,
    "fastmcp proxy": fastmcp_proxy,
    "mcp-proxy, HTTP front": mcp_proxy_http_front,
    "mcp-proxy, stdio front": mcp_proxy_stdio_front,
    "mcp-remote": mcp_remote,
}


def keyed(placement: str, arguments: dict, key: str) -> dict:
    """A charge's tools/call params, the key exactly where `placement` puts it."""
    if placement == "meta":
        return {"name": TOOL, "arguments": arguments, "_meta": {META_KEY: key}}
    if placement == "params":
        return {"name": TOOL, "arguments": arguments, "idempotencyKey": key}
    return {"name": TOOL, "arguments": {**arguments, KEY_ARGUMENT: key}}


def declared(wire: Wire, placement: str) -> object:
    """What the client was shown of the server's promise: the capability, or the mark on the key's property."""
    if placement == "meta":
        return (wire.capabilities.get("extensions") or {}).get(EXTENSION_ID)
    if placement == "params":
        return (wire.capabilities.get("tools") or {}).get("idempotency")
    [tool] = [tool for tool in wire.request("tools/list", {})["result"]["tools"] if tool["name"] == TOOL]
    return tool["inputSchema"]["properties"].get(KEY_ARGUMENT, {}).get(ARGUMENT_MARK)


def as_received(response: dict, key: str) -> dict:
    """A response as the client got it: a JSON-RPC error and its data, or a tool result (which may stand in for a
    rejection), its text with the key left out."""
    if "error" in response:
        data = response["error"].get("data") or {}
        return {"code": response["error"]["code"], "type": data.get("type"), "retryable": data.get("retryable")}
    result = response["result"]
    text = " ".join(part.get("text", "") for part in result.get("content", []))
    return {"isError": result.get("isError", False), "text": text.replace(key, "KEY")}


def acknowledged(response: dict, key: str) -> str | None:
    """The acknowledgement a result carried in its `_meta`: "the key" when it names the key sent, else what it
    said (None: none)."""
    said = (response.get("result", {}).get("_meta") or {}).get(ACKNOWLEDGEMENT)
    return None if said is None else "the key" if said == acknowledgement(key) else json.dumps(said)


def server_said(log: Path, key: str) -> dict:
    """The server's decisions on `key`: how often it claimed and replayed it, and how many charges had no key."""
    text = log.read_text()
    return {
        "claimed": text.count(f"claimed: key={key!r}"),
        "replayed": text.count(f"replayed: key={key!r}"),
        "no_key": text.count(f"no key: tool={TOOL}"),
    }


def wait_for(log: Path, text: str) -> None:
    """Wait until the server's log holds `text` (a call it has claimed and is still running)."""
    deadline = time.monotonic() + REPLY_TIMEOUT
    while text not in log.read_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never logged {text!r}; its log:\n{log.read_text()}")
        time.sleep(0.02)


def in_progress(wire: Wire, placement: str, log: Path) -> dict:
    """A second call with a key whose first call is still running, as it reached the client."""
    key = new_key()
    running = wire.send_request("tools/call", keyed(placement, {"amount": 7}, key))
    wait_for(log, f"claimed: key={key!r}")
    busy = wire.request("tools/call", keyed(placement, {"amount": 7}, key))
    wire.reply(running)
    return as_received(busy, key)


def measured(route: str, placement: str) -> dict:
    """One route in one placement: the same charge twice with one key, then the key with other arguments, then a
    call while its key is still running; what the client was shown, and what the server did."""
    with tempfile.TemporaryDirectory(prefix="sep3182-gateway-") as folder:
        log = Path(folder) / "server.log"
        log.touch()
        with ROUTES[route](server_command(placement, log, "--charge-delay", str(CHARGE_DELAY))) as wire:
            run: dict = {"declared": declared(wire, placement)}
            key = new_key()
            first, again = (wire.request("tools/call", keyed(placement, {"amount": 7}, key)) for _ in range(2))
            run |= {"server": server_said(log, key), "charges": wire.ledger()["charges"]}
            run["outcomes"] = [as_received(first, key), as_received(again, key)]
            run["acknowledged"] = [acknowledged(first, key), acknowledged(again, key)]
            if run["server"]["claimed"]:
                conflict = wire.request("tools/call", keyed(placement, {"amount": 8}, key))
                run |= {"conflict": as_received(conflict, key), "in_progress": in_progress(wire, placement, log)}
    return run
