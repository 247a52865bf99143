"""P15 across languages: a Python instance and a TypeScript one on one store are one server to a retry.

The 2.x ledger server (sep3182-ledger-server) and typescript/server.ts, on the mcp-idempotency package, keep the
same records on a SQLite file or a PostgreSQL database (the Python library's tables, claim and SQL, the same
scoped key and fingerprint) and the same ledger table, so a call first sent to one and retried on the other
replays, charging once; and another request under the key is a conflict on either. The kit passes against the
TypeScript server on each store, each of its servers on a store of its own.
"""

import json
import subprocess
import sys
from contextlib import ExitStack

import pytest
from conftest import postgres_database
from kit_targets import KIT, SHORT_DEADLINE, SHORT_LEASE, VARIANTS, typescript_server
from node_packages import typescript_built
from wire import LegacyStdioWire, start

STORES = ["sqlite", "postgresql"]


def new_store(kind: str, databases: ExitStack, folder, name: str) -> str:
    """A new, empty store of `kind`: a SQLite file in `folder`, or a PostgreSQL database of its own."""
    return databases.enter_context(postgres_database()) if kind == "postgresql" else f"sqlite:{folder / name}.db"


@pytest.fixture(params=STORES)
def both(request, tmp_path):
    """The Python and the TypeScript ledger server over stdio on one new store, in the field placement."""
    typescript_built()
    with ExitStack() as databases:
        store = new_store(request.param, databases, tmp_path, "store")
        python = start("2x-stdio", "--store", store)  # the Python instance makes the tables first
        typescript = LegacyStdioWire("ts-stdio", [*typescript_server(), "--verbose", "--store", store])
        yield python, typescript
        typescript.close()
        python.close()


def text_of(response: dict) -> str:
    """The one text a charge answers with."""
    return response["result"]["content"][0]["text"]


def test_a_call_sent_to_python_and_retried_on_typescript_charges_once(both):
    python, typescript = both
    first = python.charge(100, key="order-py")
    retried = typescript.charge(100.0, key="order-py")  # 100.0 is 100: the same request
    assert text_of(retried) == text_of(first) == "Charged 100. New balance: 100"
    assert python.ledger() == typescript.ledger() == {"balance": 100, "charges": 1}
    assert "replayed: key='order-py'" in typescript.log()


def test_a_call_sent_to_typescript_and_retried_on_python_charges_once(both):
    python, typescript = both
    first = typescript.charge(250, key="order-ts")
    retried = python.charge(250, key="order-ts")
    assert text_of(retried) == text_of(first) == "Charged 250. New balance: 250"
    assert python.ledger() == typescript.ledger() == {"balance": 250, "charges": 1}


@pytest.mark.parametrize("first_on", ["python", "typescript"])
def test_another_request_under_a_key_the_other_language_holds_is_a_conflict(both, first_on):
    python, typescript = both
    holder, other = (python, typescript) if first_on == "python" else (typescript, python)
    holder.charge(100, key="order-1")
    error = other.charge(200, key="order-1")["error"]
    assert error["data"] == {"type": "idempotency_key_conflict", "retryable": False, "idempotencyKey": "order-1"}
    assert python.ledger() == {"balance": 100, "charges": 1}


def test_the_typescript_server_refuses_a_store_in_a_missing_folder_in_one_line(tmp_path):
    typescript_built()
    store = f"sqlite:{tmp_path / 'nowhere' / 'store.db'}"
    ran = subprocess.run([*typescript_server(), "--store", store], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        f"server.js: --store {store}: there is no folder {tmp_path / 'nowhere'} for the SQLite file: "
        "create it, or point the store elsewhere"
    )


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
@pytest.mark.parametrize("store", STORES)
def test_the_kit_passes_on_the_typescript_server(store, tmp_path):
    """The whole kit, each of its servers (main, slow, short window, bounded, short lease and deadline) on a store
    of its own, the records and the ledger there: every check a server without authorisation can meet passes."""
    typescript_built()
    with ExitStack() as databases:
        options = []
        for variant, server_args in VARIANTS.items():
            url = new_store(store, databases, tmp_path, f"store-{variant or 'main'}")
            bounds = {"short-lease-": SHORT_LEASE, "short-deadline-": SHORT_DEADLINE}.get(variant, [])
            server = [*typescript_server(), "--store", url, *server_args, *bounds]
            options += [f"--{variant}command", subprocess.list2cmdline(server)]
        report = tmp_path / "checks.json"
        ran = subprocess.run(
            [sys.executable, str(KIT), *options, "--json", str(report)], capture_output=True, text=True, timeout=600
        )
    results = {result["id"]: result["status"] for result in json.loads(report.read_text())}
    assert [check for check, status in results.items() if status in ("FAILURE", "WARNING")] == [], ran.stdout[-3000:]
    assert list(results.values()).count("SUCCESS") >= 33, ran.stdout[-3000:]  # as many as on its memory store
