"""P15 across languages on SQLite: a Python instance and a TypeScript one on one SQLite file are one server to a retry.

The 2.x ledger server (sep3182-ledger-server) and typescript/server.ts, on the mcp-idempotency package, keep the
same records in the same file (the TypeScript store runs the Python store's own statements, takes the same
PATH.lock turn to make the tables, and the same write lock), the same scoped key and fingerprint, and the same
ledger table, so a call first sent to one and retried on the other replays, charging once; and another request
under the key is a conflict on either. The kit then runs against the TypeScript server, and against the package's
example shop, each of its servers on a SQLite file of its own, as it does on PostgreSQL.
"""

import json
import subprocess
import sys

import pytest
from kit_targets import KIT, SHORT_DEADLINE, SHORT_LEASE, VARIANTS, typescript_server
from node_packages import PACKAGE, typescript_built
from test_public_api import CONTRACTS, NEED_TWO_PRINCIPALS, NOT_APPLICABLE, SERVERS
from wire import LegacyStdioWire, start


@pytest.fixture
def both(tmp_path):
    """The Python and the TypeScript ledger server over stdio on one new SQLite file, in the field placement."""
    typescript_built()
    store = f"sqlite:{tmp_path / 'store.db'}"
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


def kit_results(options: list[str], tmp_path) -> tuple[dict[str, str], str]:
    """Run the kit with `options`: each check's status, and the end of what it printed."""
    report = tmp_path / "checks.json"
    ran = subprocess.run(
        [sys.executable, str(KIT), *options, "--json", str(report)], capture_output=True, text=True, timeout=600
    )
    return {result["id"]: result["status"] for result in json.loads(report.read_text())}, ran.stdout[-3000:]


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
def test_the_kit_passes_on_the_typescript_server_on_sqlite(tmp_path):
    """The whole kit, each of its servers (main, slow, short window, bounded, short lease and deadline) on a
    SQLite file of its own, the records and the ledger there: every check a server without authorisation can meet
    passes."""
    typescript_built()
    options = []
    for variant, server_args in VARIANTS.items():
        bounds = {"short-lease-": SHORT_LEASE, "short-deadline-": SHORT_DEADLINE}.get(variant, [])
        name = variant or "main"
        store = f"sqlite:{tmp_path / f'store-{name}.db'}"
        server = [*typescript_server(), "--store", store, *server_args, *bounds]
        options += [f"--{variant}command", subprocess.list2cmdline(server)]
    results, printed = kit_results(options, tmp_path)
    assert [check for check, status in results.items() if status in ("FAILURE", "WARNING")] == [], printed
    assert list(results.values()).count("SUCCESS") >= 33, printed  # as many as on its memory store


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
def test_the_typescript_shop_written_from_the_readme_passes_the_kit_on_sqlite(tmp_path):
    """The package's example shop, as tests/test_typescript_examples.py runs it on PostgreSQL, on SQLite files."""
    typescript_built()
    options = []
    for variant, server_args in SERVERS.items():
        name = variant or "main"
        store, outbox = f"sqlite:{tmp_path / f'store-{name}.db'}", tmp_path / f"outbox-{name}.txt"
        shop = ["node", str(PACKAGE / "dist-examples" / "shop.js"), "--store", store, "--outbox", str(outbox)]
        options += [f"--{variant}command", subprocess.list2cmdline([*shop, *server_args])]
    results, printed = kit_results([*options, *CONTRACTS["shop"]], tmp_path)
    assert [check for check, status in results.items() if status in ("FAILURE", "WARNING")] == [], printed
    refused = {"sep-3182-equivalence-numbers"}  # as on PostgreSQL: JSON.parse rounds the check's 1e20
    untested = NEED_TWO_PRINCIPALS | NOT_APPLICABLE | refused | {"sep-3182-replay-across-revisions"}
    assert [check for check, status in results.items() if status != "SUCCESS" and check not in untested] == []
