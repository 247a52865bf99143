"""The TypeScript package's README as an implementer meets it: a shop written from it alone passes the kit.

typescript/packages/mcp-idempotency/examples/shop.ts, compiled: `pay` writes its effect in the store's unit of
work, `send_receipt` appends to an outbox with the downstream key, both take an account beyond the kit's own
arguments (--tool-arguments). The kit runs against it with each of its servers on a PostgreSQL database of its own,
and on the memory store, which runs `pay`'s statements on a private in-process SQLite database, committed with the
record (tests/test_typescript_sqlite.py runs it on SQLite files).
"""

import json
import subprocess
import sys
from contextlib import ExitStack

import pytest
from conftest import postgres_database
from kit_targets import KIT
from node_packages import PACKAGE, typescript_built
from test_public_api import CONTRACTS, NEED_TWO_PRINCIPALS, NOT_APPLICABLE, SERVERS
from wire import LegacyStdioWire

from mcp_idempotency.rules import META_KEY, downstream_key, fingerprint, scoped_key

SHOP = PACKAGE / "dist-examples" / "shop.js"


def assert_kit_passes(stores: dict[str, str], tmp_path) -> None:
    """The kit against the shop, each of its servers on the store `stores` names for it: every check the shop can
    meet succeeds, and none fails or warns."""
    options = []
    for variant, server_args in SERVERS.items():
        name = variant or "main"
        outbox = tmp_path / f"outbox-{name}.txt"
        shop = ["node", str(SHOP), "--store", stores[name], "--outbox", str(outbox), *server_args]
        options += [f"--{variant}command", subprocess.list2cmdline(shop)]
    report = tmp_path / "checks.json"
    ran = subprocess.run(
        [sys.executable, str(KIT), *options, *CONTRACTS["shop"], "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    results = {result["id"]: result["status"] for result in json.loads(report.read_text())}
    assert [check for check, status in results.items() if status in ("FAILURE", "WARNING")] == [], ran.stdout[-3000:]
    # As on typescript/server.ts: the check's 1e20 spelling is refused keyed, since JSON.parse gives every integer
    # past 2^53 as the double nearest it, and the kit skips the rest of the row.
    refused = {"sep-3182-equivalence-numbers"}
    untested = NEED_TWO_PRINCIPALS | NOT_APPLICABLE | refused | {"sep-3182-replay-across-revisions"}
    assert [check for check, status in results.items() if status != "SUCCESS" and check not in untested] == []


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
def test_the_typescript_shop_written_from_the_readme_passes_the_kit_on_postgresql(tmp_path):
    typescript_built()
    with ExitStack() as databases:
        assert_kit_passes(
            {variant or "main": databases.enter_context(postgres_database()) for variant in SERVERS}, tmp_path
        )


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
def test_the_typescript_shop_written_from_the_readme_passes_the_kit_on_memory(tmp_path):
    """`pay` writes through the unit of work on the memory store too: its private SQLite database."""
    typescript_built()
    assert_kit_passes({variant or "main": "memory" for variant in SERVERS}, tmp_path)


def test_the_typescript_shop_forwards_the_downstream_key_the_python_library_derives(tmp_path):
    """A receipt sent keyed, then retried: one e-mail, under the key rules.downstream_key gives the call."""
    typescript_built()
    outbox = tmp_path / "outbox.txt"
    shop = LegacyStdioWire("ts-stdio", ["node", str(SHOP), "--outbox", str(outbox)])
    try:
        arguments = {"account": "ada", "amount": 5}
        for _ in range(2):
            shop.call("send_receipt", arguments, _meta={META_KEY: "receipt-1"})
    finally:
        shop.close()
    expected = downstream_key(scoped_key(("one tenant",), "receipt-1"), fingerprint("send_receipt", arguments))
    assert outbox.read_text().splitlines() == [f"to ada: your payment of 5 (Idempotency-Key: {expected})"]
