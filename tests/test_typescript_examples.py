"""The TypeScript package's README as an implementer meets it: a shop written from it alone passes the kit.

typescript/packages/mcp-idempotency/examples/shop-tools.ts holds the shop's tools: `pay` writes its effect in the
store's unit of work, `send_receipt` appends to an outbox with the downstream key, both take an account beyond the
kit's own arguments (--tool-arguments). Two small entry files register them, one per line of the SDK: shop.ts on
1.x's McpServer, shop-v2.ts on 2.x's, served over stdio by serveStdio or over Streamable HTTP by createMcpHandler,
each of which speaks 2026-07-28 (server/discover, the per-request envelope, results that name their type) or the
2025 revisions as the client opens. The kit runs against each, each of its servers on a store of its own: memory
(where `pay` writes on the store's private in-process SQLite database, committed with the record), a SQLite file,
a PostgreSQL database.
"""

import json
import subprocess
import sys
from contextlib import ExitStack

import pytest
from conftest import postgres_database
from kit_targets import KIT, http_servers
from node_packages import PACKAGE, typescript_built
from test_public_api import CONTRACTS, NEED_TWO_PRINCIPALS, NOT_APPLICABLE, SERVERS
from wire import LegacyStdioWire, ModernStdioWire

from mcp_idempotency.rules import ACKNOWLEDGEMENT, META_KEY, downstream_key, fingerprint, scoped_key

SHOPS = {"1.x": PACKAGE / "dist-examples" / "shop.js", "2.x": PACKAGE / "dist-examples" / "shop-v2.js"}
# Each line and transport the kit runs against: the shop's line, and whether it is served over HTTP.
SERVED = {"1.x": ("1.x", False), "2.x": ("2.x", False), "2.x-http": ("2.x", True)}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"  # 2.x's stamp on each 2026-07-28 result
# The check's 1e20 spelling is refused keyed, since JSON.parse gives every integer past 2^53 as the double nearest
# it, and the kit skips the rest of the row. A retry in another revision needs a server over HTTP: over stdio,
# test_a_call_recorded_on_2026_is_replayed_to_a_2025_retry_and_back does it over one SQLite file.
UNTESTED = NEED_TWO_PRINCIPALS | NOT_APPLICABLE | {"sep-3182-equivalence-numbers"}
UNTESTED_ON_STDIO = UNTESTED | {"sep-3182-replay-across-revisions"}


def shop(line: str, store: str, outbox, *options: str) -> list[str]:
    """The command line of the shop on one line of the SDK."""
    return ["node", str(SHOPS[line]), "--store", store, "--outbox", str(outbox), *options]


def stores_of(kind: str, databases: ExitStack, tmp_path) -> dict[str, str]:
    """A store of `kind` for each of the kit's servers, none shared."""
    names = [variant or "main" for variant in SERVERS]
    if kind == "postgresql":
        return {name: databases.enter_context(postgres_database()) for name in names}
    return {name: "memory" if kind == "memory" else f"sqlite:{tmp_path / f'store-{name}.db'}" for name in names}


@pytest.mark.slow  # the whole kit against a server: the slow set's, as for every other server
@pytest.mark.parametrize("store", ["memory", "sqlite", "postgresql"])
@pytest.mark.parametrize("served", list(SERVED))
def test_the_shop_written_from_the_readme_passes_the_kit(served, store, tmp_path):
    """Every check the shop can meet succeeds, and none fails or warns."""
    typescript_built()
    line, over_http = SERVED[served]
    with ExitStack() as running:
        stores = stores_of(store, running, tmp_path)
        commands = {
            variant: shop(line, stores[variant or "main"], tmp_path / f"outbox-{variant or 'main'}.txt", *server_args)
            for variant, server_args in SERVERS.items()
        }
        if over_http:
            urls = running.enter_context(http_servers(list(commands.values())))
            targets = {f"--{variant}url": url for variant, url in zip(commands, urls, strict=True)}
        else:
            targets = {f"--{variant}command": subprocess.list2cmdline(command) for variant, command in commands.items()}
        options = [word for target in targets.items() for word in target]
        report = tmp_path / "checks.json"
        ran = subprocess.run(
            [sys.executable, str(KIT), *options, *CONTRACTS["shop"], "--json", str(report)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    results = {result["id"]: result["status"] for result in json.loads(report.read_text())}
    printed = ran.stdout[-3000:]
    untested = UNTESTED if over_http else UNTESTED_ON_STDIO
    assert [check for check, status in results.items() if status in ("FAILURE", "WARNING")] == [], printed
    assert [check for check, status in results.items() if status != "SUCCESS" and check not in untested] == [], printed


@pytest.mark.parametrize(
    ("line", "wire"),
    [("1.x", LegacyStdioWire), ("2.x", ModernStdioWire), ("2.x", LegacyStdioWire)],
    ids=["1.x", "2.x-2026-07-28", "2.x-2025-03-26"],
)
def test_receipts_read_together_each_go_out_under_their_own_calls_downstream_key(tmp_path, line, wire):
    """Two keyed receipts in one write, so that the server reads them at once (2.x's serveStdio queues the second
    while it dispatches the first): each tool runs in its own call's context and forwards that call's key."""
    typescript_built()
    outbox = tmp_path / "outbox.txt"
    connection = wire("ts-stdio", shop(line, "memory", outbox))
    calls = {f"receipt-{amount}": {"account": "ada", "amount": amount} for amount in (1, 2)}
    messages = [
        connection.frame(
            {
                "jsonrpc": "2.0",
                "id": key,
                "method": "tools/call",
                "params": {"name": "send_receipt", "arguments": arguments, "_meta": {META_KEY: key}},
            }
        )
        for key, arguments in calls.items()
    ]
    try:
        connection.send_line("\n".join(json.dumps(message) for message in messages))
        answers = [connection.reply(key) for key in calls]
    finally:
        connection.close()
    assert all("result" in answer for answer in answers), answers
    forwarded = {
        key: downstream_key(scoped_key(("one tenant",), key), fingerprint("send_receipt", arguments))
        for key, arguments in calls.items()
    }
    assert sorted(outbox.read_text().splitlines()) == [
        f"to ada: your payment of {arguments['amount']} (Idempotency-Key: {forwarded[key]})"
        for key, arguments in calls.items()
    ]


@pytest.mark.parametrize(
    ("line", "wire"),
    [("1.x", LegacyStdioWire), ("2.x", ModernStdioWire), ("2.x", LegacyStdioWire)],
    ids=["1.x", "2.x-2026-07-28", "2.x-2025-03-26"],
)
def test_the_shop_sends_one_receipt_under_the_downstream_key_the_python_library_derives(tmp_path, line, wire):
    """A receipt sent keyed, then retried, on the memory store: one e-mail, under the key rules.downstream_key gives
    the call, and the replay is the first answer, acknowledged."""
    typescript_built()
    outbox = tmp_path / "outbox.txt"
    connection = wire("ts-stdio", shop(line, "memory", outbox))
    try:
        arguments = {"account": "ada", "amount": 5}
        first, retried = (connection.call("send_receipt", arguments, _meta={META_KEY: "receipt-1"}) for _ in range(2))
    finally:
        connection.close()
    assert retried == {**first, "id": retried["id"]}
    assert first["result"]["_meta"][ACKNOWLEDGEMENT] == {"idempotencyKey": "receipt-1"}
    assert ("resultType" in first["result"]) == (wire is ModernStdioWire)
    expected = downstream_key(scoped_key(("one tenant",), "receipt-1"), fingerprint("send_receipt", arguments))
    assert outbox.read_text().splitlines() == [f"to ada: your payment of 5 (Idempotency-Key: {expected})"]


def test_a_call_recorded_on_2026_is_replayed_to_a_2025_retry_and_back(tmp_path):
    """Two 2.x shops on one SQLite file, one spoken to on 2026-07-28 and one on the 2025 handshake: a payment made
    on either and retried on the other is paid once, and each replay has its revision's shape: a type on 2026-07-28;
    neither a type nor 2.x's server stamp on 2025."""
    typescript_built()
    store = f"sqlite:{tmp_path / 'store.db'}"
    modern = ModernStdioWire("ts-v2-stdio", shop("2.x", store, tmp_path / "outbox.txt"))
    legacy = LegacyStdioWire("ts-v2-stdio", shop("2.x", store, tmp_path / "outbox.txt"))
    try:
        for first_on, retried_on, key in ((modern, legacy, "order-1"), (legacy, modern, "order-2")):
            first = first_on.call("pay", {"account": key, "amount": 7}, _meta={META_KEY: key})["result"]
            retried = retried_on.call("pay", {"account": key, "amount": 7}, _meta={META_KEY: key})["result"]
            assert retried["content"] == first["content"] == [{"type": "text", "text": f"Paid 7 into {key}: balance 7"}]
            for on, result in ((first_on, first), (retried_on, retried)):
                assert ("resultType" in result) == (on is modern)
                assert result["_meta"][ACKNOWLEDGEMENT] == {"idempotencyKey": key}
                if on is legacy:
                    assert SERVER_INFO not in result["_meta"]
        counted = json.loads(legacy.call("payments", {})["result"]["content"][0]["text"])
    finally:
        modern.close()
        legacy.close()
    assert counted == {"payments": 2, "balance": 14}
