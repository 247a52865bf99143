"""P15 across languages: a Python instance and a TypeScript one on one PostgreSQL store are one server to a retry.

The 2.x ledger server (sep3182-ledger-server) and typescript/server.ts, on the mcp-idempotency package, keep the
same records (the Python library's tables and claim function, the same scoped key and fingerprint) and the same
ledger table, so a call first sent to one and retried on the other replays, charging once; and another request
under the key is a conflict on either.
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


@pytest.fixture
def both(postgres_url):
    """The Python and the TypeScript ledger server over stdio on one new PostgreSQL database, in the field placement."""
    typescript_built()
    python = start("2x-stdio", "--store", postgres_url)  # the Python instance makes the tables first
    typescript = LegacyStdioWire("ts-stdio", [*typescript_server(), "--verbose", "--store", postgres_url])
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
    assert python.ledger() == {"balance": 250, "charges": 1}


@pytest.mark.parametrize("first_on", ["python", "typescript"])
def test_another_request_under_a_key_the_other_language_holds_is_a_conflict(both, first_on):
    python, typescript = both
    holder, other = (python, typescript) if first_on == "python" else (typescript, python)
    holder.charge(100, key="order-1")
    error = other.charge(200, key="order-1")["error"]
    assert error["data"] == {"type": "idempotency_key_conflict", "retryable": False, "idempotencyKey": "order-1"}
    assert python.ledger() == {"balance": 100, "charges": 1}


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
def test_the_kit_passes_on_the_typescript_server_on_postgresql(tmp_path):
    """The whole kit, each of its servers (main, slow, short window, bounded, short lease and deadline) on a
    PostgreSQL database of its own, the records and the ledger there: every check a server without authorisation
    can meet passes."""
    typescript_built()
    with ExitStack() as databases:
        options = []
        for variant, server_args in VARIANTS.items():
            url = databases.enter_context(postgres_database())
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
