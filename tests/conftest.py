"""Fixtures: a server on every target (raw JSON-RPC `Wire`), the 1.x SDK's client, and in process.

`--target 2x-http` (repeatable) narrows the wire-level suite to some targets.
"""

import os
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta

import pytest
from wire import REPLY_TIMEOUT, SERVER, TARGETS, LegacyStdioWire, start


def pytest_addoption(parser):
    parser.addoption(
        "--target",
        action="append",
        choices=TARGETS,
        help="run the wire-level tests against this target only (repeatable; default: all)",
    )
    parser.addoption(
        "--print-targets",
        action="store_true",
        help="after collecting, list each test with the targets it runs on and its tier (test_conformance.py)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "targets(*names): run this test on these targets only (default: all)")
    config.addinivalue_line(
        "markers", "quick_targets(*names): the quick set runs it on these; its other targets are slow"
    )


def pytest_collection_modifyitems(config, items):
    """--target leaves out every test of another target: by its `target`, or by its `targets` mark."""
    chosen = config.getoption("target")
    if not chosen:
        return
    kept, left_out = [], []
    for item in items:
        targets = targets_of(item)
        (left_out if targets and not set(targets) & set(chosen) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def targets_of(item) -> list[str]:
    """The targets one collected test exercises: its `target`, else its `targets` mark."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "target" in callspec.params:
        return [callspec.params["target"]]
    marked = item.get_closest_marker("targets")
    return [] if marked is None else list(marked.args)


# The tiers (CONTRIBUTING.md, tests/CONFORMANCE.md): the conformance kit, black-box against a server; a rule played on
# a real server over one transport (`target`); the layer, server.py or a store driven in this process; a demo played
# whole; the documents and the tables kept true; and what none of these is (several instances, faults, the SDKs'
# clients).
KIT_MODULES = {"test_kit.py", "test_kit_stand_ins.py", "test_kit_fixture.py"}
DEMO_MODULES = {"test_demo.py", "test_sdk2_demos.py"}
DOCS_MODULES = {
    "test_conformance.py",
    "test_extension_home.py",
    "test_hygiene.py",
    "test_sep_trace.py",
    "test_upstream_sep_yaml.py",
}
IN_PROCESS_MODULES = {
    "test_store.py",
    "test_store_rules.py",
    "test_store_sql.py",
    "test_races_stores.py",
    "test_rules_edges.py",
    "test_unit_of_work_edges.py",
    "test_unit_of_work_owner.py",
}


def tier_of(item) -> str:
    """The tier one collected test belongs to: kit, transport, in-process, demo, docs or system."""
    module = item.path.name
    callspec = getattr(item, "callspec", None)
    if module in KIT_MODULES:
        return "kit"
    if callspec is not None and "target" in callspec.params:
        return "transport"
    if module in IN_PROCESS_MODULES or "dedup" in item.fixturenames:
        return "in-process"
    if module in DEMO_MODULES:
        return "demo"
    return "docs" if module in DOCS_MODULES else "system"


def pytest_report_collectionfinish(config, items):
    if config.getoption("print_targets"):
        return [f"targets {item.nodeid.split('[')[0]} {tier_of(item)} {','.join(targets_of(item))}" for item in items]
    return []


def pytest_generate_tests(metafunc):
    """Every test that asks for `target` runs once per target, or per target its `targets` mark names."""
    if "target" in metafunc.fixturenames:
        marked = metafunc.definition.get_closest_marker("targets")
        targets = TARGETS if marked is None else [name for name in TARGETS if name in marked.args]
        # A module's one server per target (shared_wire, outcome_wire, tasks_wire) needs the target chosen per module.
        per_module = {"shared_wire", "outcome_wire", "tasks_wire"} & set(metafunc.fixturenames)
        metafunc.parametrize(
            "target", [target_param(metafunc, name) for name in targets], scope="module" if per_module else None
        )


def target_param(metafunc, target: str):
    """One target of a test: in the slow set if its `quick_targets` mark leaves that target out of the quick set."""
    quick = metafunc.definition.get_closest_marker("quick_targets")
    slow = quick is not None and target not in quick.args
    return pytest.param(target, marks=[pytest.mark.slow] if slow else [])


@pytest.fixture
def spawn(target, tmp_path):
    """Start the target's server with command-line options: spawn("--charge-delay", "0.5")."""
    wires = []

    def started(*server_args: str, **options):
        wires.append(start(target, *server_args, store_dir=tmp_path / str(len(wires)), **options))
        return wires[-1]

    yield started
    for wire in wires:
        wire.close()


@pytest.fixture
def spawn_typescript():
    """Start the TypeScript server (typescript/server.ts, compiled) over stdio, after the 2025 handshake, with
    command-line options: spawn_typescript("--max-records", "2")."""
    from kit_targets import typescript_server  # loads the kit: only for the tests that ask
    from node_packages import typescript_built

    typescript_built()
    wires = []

    def started(*server_args: str):
        wires.append(LegacyStdioWire("ts-stdio", [*typescript_server(), "--verbose", *server_args]))
        return wires[-1]

    yield started
    for wire in wires:
        wire.close()


@pytest.fixture
def wire(spawn):
    """A fresh server on the target, with default settings."""
    return spawn()


@pytest.fixture(scope="module")
def shared_wire(target, tmp_path_factory):
    """One server per target for a whole module whose rows are independent (own keys, ledger deltas)."""
    wire = start(target, store_dir=tmp_path_factory.mktemp(target))
    yield wire
    wire.close()


# A PostgreSQL server to test against: tests/postgres.sh starts a throwaway one, and
# .ci/run does so and sets this. Each test gets a database of its own on it.
POSTGRES = os.environ.get("SEP3182_POSTGRES")
NO_POSTGRES = (
    "no PostgreSQL server: start one with tests/postgres.sh start DIR PORT "
    "and set SEP3182_POSTGRES to the URL it prints"
)


@contextmanager
def postgres_database():
    """A new, empty database on the PostgreSQL server SEP3182_POSTGRES names, dropped afterwards; its URL."""
    if not POSTGRES:
        pytest.skip(NO_POSTGRES)
    import anyio
    import asyncpg

    name = f"sep3182_{uuid.uuid4().hex[:12]}"

    async def execute(statement: str) -> None:
        connection = await asyncpg.connect(POSTGRES)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    def admin(statement: str) -> None:
        # In a thread of its own, so that an async fixture may ask for this one too.
        with ThreadPoolExecutor(1) as thread:
            thread.submit(anyio.run, execute, statement).result()

    admin(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES.rsplit("/", 1)[0] + "/" + name
    finally:
        admin(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def postgres_url():
    """The URL of a new, empty database on the PostgreSQL server SEP3182_POSTGRES names; dropped afterwards."""
    with postgres_database() as url:
        yield url


@contextmanager
def fresh_store(kind: str, tmp_path, name: str):
    """A new, empty store of one kind: memory, a SQLite file, or a PostgreSQL database; its URL."""
    if kind == "postgresql":
        with postgres_database() as url:
            yield url
    else:
        yield "memory" if kind == "memory" else f"sqlite:{tmp_path / name}.db"


@pytest.fixture(scope="module")
def issuer():
    """The OAuth issuer (tests/oauth.py) a module's servers trust, unless a test starts its own."""
    from oauth import Issuer

    issuer = Issuer()
    yield issuer
    issuer.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A store every instance of a test shares: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")


@asynccontextmanager
async def sdk_session(*server_args: str, command: list[str] | None = None):
    """The Python SDK's own client (mcp 1.x), connected over stdio to a server.py subprocess, or to `command`."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = command or [sys.executable, str(SERVER), *server_args]
    params = StdioServerParameters(command=command[0], args=command[1:])
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=timedelta(seconds=REPLY_TIMEOUT)) as session,
        ):
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
    """server.py in this process, with a fake clock and a clean ledger and store."""
    import server

    monkeypatch.setattr(server, "clock", FakeClock())
    monkeypatch.setattr(server, "ledger", {"balance": 0, "charges": 0})
    monkeypatch.setattr(server, "_dedup_store", {})
    return server


def stored_keys(server) -> list[str]:
    """The keys server.py holds records for, in the store's order (completed ones in expiry order)."""
    return [key for _scope, key in server._dedup_store]


@asynccontextmanager
async def in_process_session(server_module):
    """The SDK's client connected to the server module's own FastMCP in memory."""
    from mcp.shared.memory import create_connected_server_and_client_session

    async with create_connected_server_and_client_session(server_module.server) as session:
        yield session
