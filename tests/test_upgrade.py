"""Upgrading a store in place: one made by the previous version (schema 2, the demo's ledger kept inside it)
is refused at start in one line naming `mcp-idempotency-store upgrade URL`; that command brings it to
version 3, every record and the ledger kept; the 2.x ledger server then replays its records and carries
on from its ledger. On SQLite and PostgreSQL (the memory store keeps nothing across a restart).

The version 2 store is made with the previous version's own schema text (tests/fixtures/), as it made
it, and its rows are written with SQL: a completed record, as the layer keys and records one, and the
ledger's row.
"""

import contextlib
import http.client
import itertools
import json
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest
from stores import execute, read_store
from test_store import SCHEMA_1
from wire import SDK2_SERVER, HttpWire, free_port, sdk2_python, start, text_of, with_envelope

from mcp_idempotency.rules import fingerprint

# serial: load across instances through an upgrade, so CI runs it alone.
pytestmark = [pytest.mark.targets("2x-http"), pytest.mark.serial]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KEY = "order-1"
STORE_KEY = json.dumps(["one tenant", KEY])  # K2: the one tenant's key, as the layer keys its record
BARE_KEY = "order-0"  # a record keyed by the bare key, as the version before scoping wrote it: nobody's (P9')
FINGERPRINT = fingerprint("charge_guarded", {"amount": 100})
CHARGED = "Charged 100. New balance: 250"  # the second charge of the ledger below
# P6, P20: recorded for a 2025 revision; the retry speaks 2026-07-28, so the replay is reshaped, not re-run.
OUTCOME = json.dumps(
    {"revision": "2025-06-18", "result": {"content": [{"type": "text", "text": CHARGED}], "isError": False}}
)
LEDGER = {"balance": 250, "charges": 2}


def made_by_version_2(url: str, keys: tuple[str, ...] = (KEY,)) -> None:
    """A store as the previous version made it: a completed record for each of the one tenant's `keys` and
    for BARE_KEY, and the ledger's two charges."""
    stored = [*(json.dumps(["one tenant", key]) for key in keys), BARE_KEY]
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.executescript(f"BEGIN IMMEDIATE; {(FIXTURES / 'sqlite_v2.sql').read_text()} COMMIT;")
            db.execute("BEGIN IMMEDIATE")
            for key in stored:
                db.execute(
                    "INSERT INTO idempotency_records (key, fingerprint, status, deadline, outcome) "
                    "VALUES (?, ?, 'completed', ?, ?)",
                    (key, FINGERPRINT, time.time() + 3600, OUTCOME),
                )
            db.execute("UPDATE idempotency_record_count SET n = ?", (len(stored),))
            db.execute("UPDATE ledger SET balance = ?, charges = ?", (LEDGER["balance"], LEDGER["charges"]))
            db.execute("COMMIT")
        return

    import asyncpg

    async def make() -> None:
        db = await asyncpg.connect(url)
        try:
            async with db.transaction():
                await db.execute((FIXTURES / "postgres_v2.sql").read_text())
                for key in stored:
                    await db.execute(
                        "INSERT INTO idempotency_records (key, fingerprint, status, deadline, outcome) "
                        "VALUES ($1, $2, 'completed', clock_timestamp() + interval '1 hour', $3)",
                        key,
                        FINGERPRINT,
                        OUTCOME,
                    )
                await db.execute("UPDATE idempotency_record_count SET n = $1", len(stored))
                await db.execute("UPDATE ledger SET balance = $1, charges = $2", LEDGER["balance"], LEDGER["charges"])
        finally:
            await db.close()

    anyio.run(make)


def run(*command: str) -> subprocess.CompletedProcess:
    """A command to its end; its exit status is the test's to judge."""
    return subprocess.run(command, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def upgrade_command() -> str:
    """`mcp-idempotency-store`, the command the refusal names, as the package installs it."""
    return str(Path(sdk2_python()).parent / "mcp-idempotency-store")


def test_a_version_2_store_is_refused_until_upgraded_then_replays_its_records_and_keeps_its_ledger(store_url):
    made_by_version_2(store_url)

    refused = run(sdk2_python(), *SDK2_SERVER, "--placement", "params", "--store", store_url)
    assert refused.returncode == 1 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"cannot open the store {store_url}: it holds schema version 2")
    assert line.endswith(f"; upgrade it in place with: mcp-idempotency-store upgrade {store_url}")

    upgraded = run(upgrade_command(), "upgrade", store_url)  # the command, exactly as the line names it
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.startswith(f"upgraded {store_url} in place from schema version 2 to 4")
    assert read_store(store_url) == (LEDGER, {STORE_KEY: OUTCOME, BARE_KEY: OUTCOME}, 2)  # every row as it was

    again = run(sdk2_python(), "-m", "mcp_idempotency.stores.command", "upgrade", store_url)
    assert again.returncode == 0 and "holds schema version 4 already: nothing to do" in again.stdout, again.stderr

    wire = start("2x-http", "--store", store_url)
    try:
        assert text_of(wire.charge(100, key=KEY)) == CHARGED  # P4.4: the record made before the upgrade
        assert f"replayed: key={KEY!r}" in wire.log()
        assert wire.ledger() == LEDGER  # the replay charged nothing, and the ledger survived
        assert text_of(wire.charge(100, key="order-2")) == "Charged 100. New balance: 350"
        assert wire.ledger() == {"balance": 350, "charges": 3}
    finally:
        wire.close()
    # P9': the upgrade gave each record its principal, read from its key: the one tenant's two
    # (the one from before the upgrade and the one after) are forgotten, the bare key is nobody's.
    forgot = run(upgrade_command(), "forget", store_url, "one tenant")
    assert forgot.stdout.startswith('forgot 2 record(s) of ["one tenant"]'), forgot.stderr
    assert read_store(store_url)[1:] == ({BARE_KEY: OUTCOME}, 1)


def test_the_upgrade_refuses_a_version_1_store_in_one_line_and_the_server_still_refuses_it(store_url):
    execute(store_url, SCHEMA_1)

    refused = run(upgrade_command(), "upgrade", store_url)
    assert refused.returncode == 1 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"cannot upgrade the store {store_url}: it holds schema version 1")
    refused_again = run(
        sdk2_python(), *SDK2_SERVER, "--placement", "params", "--store", store_url
    )  # still version 1: still refused
    assert "schema version 1" in refused_again.stderr and refused_again.returncode == 1


def test_the_upgrade_of_a_sqlite_file_that_is_not_there_says_so_and_makes_none(tmp_path):
    path = tmp_path / "store.db"

    refused = run(upgrade_command(), "upgrade", f"sqlite:{path}")
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert line == f"cannot upgrade the store sqlite:{path}: FileNotFoundError: no such file: {path}"
    assert not path.exists()


# ----------------------------------------------------------------------------
# Slow: clients retrying through an upgrade, onto two instances
# ----------------------------------------------------------------------------

OLD_KEYS = tuple(f"old-{n}" for n in range(100))  # completed by the previous version, before the upgrade
NEW_KEYS = tuple(f"new-{n}" for n in range(100))  # first sent while the store is being upgraded
CLIENTS = 4
PATIENCE = 120  # seconds a client goes on retrying one key before the test fails


def keyed_charge(port: int, key: str) -> str | None:
    """One keyed charge of 100 to whatever listens on `port`: the result's text, or None (nothing listens yet,
    or an answer that is no result): what a client retries."""
    params = {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": key}
    message = with_envelope({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers |= {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "charge_guarded"}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/mcp", json.dumps(message).encode(), headers)
        answer = json.loads(connection.getresponse().read())
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        connection.close()
    return text_of(answer) if "result" in answer else None


def retrying(keys: tuple[str, ...], ports: list[int], texts: dict) -> None:
    """A client: each key sent until it gets a result, each try to the next instance, as a load balancer would."""
    turns = itertools.cycle(ports)
    for key in keys:
        deadline = time.monotonic() + PATIENCE
        while (text := keyed_charge(next(turns), key)) is None:
            assert time.monotonic() < deadline, f"{key}: no result within {PATIENCE} s"
            time.sleep(0.05)
        texts[key] = text


@pytest.mark.slow
def test_clients_retrying_through_an_upgrade_get_every_old_key_replayed_and_every_new_key_charged_once(store_url):
    """Issue 26: the operator stops the previous version, upgrades the store with the command, and starts two
    instances of this one, while clients keep retrying old and new keys: nothing recorded before the upgrade
    runs again, and every new key charges exactly once."""
    made_by_version_2(store_url, OLD_KEYS)
    ports, texts = [free_port(), free_port()], {}
    keys = OLD_KEYS + NEW_KEYS
    clients = [
        threading.Thread(target=retrying, args=(keys[n::CLIENTS], ports, texts), daemon=True) for n in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    refused = run(
        sdk2_python(),
        *SDK2_SERVER,
        "--placement",
        "params",
        "--store",
        store_url,
        "--port",
        str(ports[0]),
        "--transport",
        "http",
    )
    assert refused.returncode == 1 and "upgrade it in place with" in refused.stderr  # the version 2 store
    upgraded = run(upgrade_command(), "upgrade", store_url)
    assert upgraded.returncode == 0, upgraded.stderr
    command = [
        sdk2_python(),
        *SDK2_SERVER,
        "--placement",
        "params",
        "--verbose",
        "--store",
        store_url,
        "--transport",
        "http",
    ]
    instances = [HttpWire("2x-http", [*command, "--port", str(port)], port) for port in ports]
    try:
        for client in clients:
            client.join(timeout=PATIENCE * 2)
        ledger = instances[0].ledger()
        replayed = sum(instance.log().count("replayed: key=") for instance in instances)
    finally:
        for instance in instances:
            instance.close()
    assert sorted(texts) == sorted(keys)
    assert {texts[key] for key in OLD_KEYS} == {CHARGED}  # each a replay of the record made before the upgrade
    assert all(texts[key].startswith("Charged 100. New balance: ") for key in NEW_KEYS)
    assert len({texts[key] for key in NEW_KEYS}) == len(NEW_KEYS)  # every new key a charge of its own
    assert ledger == {"balance": LEDGER["balance"] + 100 * len(NEW_KEYS), "charges": LEDGER["charges"] + len(NEW_KEYS)}
    assert replayed >= len(OLD_KEYS)
    assert read_store(store_url)[2] == len(OLD_KEYS) + 1 + len(NEW_KEYS)  # the bare key's record kept too
