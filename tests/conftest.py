"""Fixtures: server.py over stdio (raw `Wire` or the SDK's client), and in process."""

import sys
import tempfile
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest

from wire import REPLY_TIMEOUT, ROOT, SERVER, Wire

sys.path.insert(0, str(ROOT))


@pytest.fixture
def wire():
    """A fresh server.py with default settings."""
    client = Wire()
    yield client
    client.close()


@pytest.fixture(scope="module")
def shared_wire():
    """One server for a whole module whose rows are independent (their own keys, ledger deltas)."""
    client = Wire()
    yield client
    client.close()


@pytest.fixture
def spawn():
    """Start server.py with command-line options: spawn("--charge-delay", "0.5")."""
    clients = []

    def start(*server_args: str) -> Wire:
        clients.append(Wire(*server_args))
        return clients[-1]

    yield start
    for client in clients:
        client.close()


@asynccontextmanager
async def sdk_session(*server_args: str):
    """The Python SDK's own client, connected to a server.py subprocess over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), *server_args])
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=REPLY_TIMEOUT)) as session:
                session.initialize_result = await session.initialize()
                yield session


class FakeClock:
    """A clock that moves only when a test says so (P8 without sleeping)."""

    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def dedup(monkeypatch):
    """The server module in this process, with a fake clock and a clean ledger and store."""
    import server

    monkeypatch.setattr(server, "clock", FakeClock())
    monkeypatch.setattr(server, "ledger", {"balance": 0, "charges": 0})
    monkeypatch.setattr(server, "_dedup_store", {})
    return server


@asynccontextmanager
async def in_process_session(server_module):
    """The SDK's client connected to the server module's own FastMCP in memory."""
    from mcp.shared.memory import create_connected_server_and_client_session

    async with create_connected_server_and_client_session(server_module.server) as session:
        yield session
