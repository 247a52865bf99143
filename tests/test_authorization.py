"""K1-K3 over HTTP with real OAuth tokens: whose key it is (P10'', P21), and a replay's authorisation (P22).

Every test starts the real issuer (mcp_idempotency_demo.issuer, Authlib) and the 2.x ledger server --issuer as
subprocesses on 127.0.0.1, and speaks with real access tokens, fetched by client
credentials for Alice and Bob; the forged ones are made the way an attacker makes them
(tests/oauth.py). What is pinned:

- K2, P21: Bob sending keys Alice used gets exactly the answers he gets where she used
  other keys, byte for byte apart from JSON-RPC ids: his own execution, his own replay,
  his own conflict, and store full once her last key filled the bound; never her result,
  her conflict or her call in progress. On memory, SQLite and PostgreSQL, on one instance
  and across two on one store.
- K3, P22: Alice's replay with a token narrowed to ledger:read gets 403 insufficient_scope,
  and with an expired token 401; neither discloses the result or records anything; her
  retry with a proper token then replays the original record.
- Bad tokens: tests/test_bad_tokens.py.
- The issuer's keys are fetched once, and again only for a kid the server does not know.
- Without authorisation: the 2.x and TypeScript servers say they serve one tenant, and will not listen
  on a non-loopback address unless told to on purpose; records of the previous version, keyed
  by the bare key, replay to nobody, on SQLite and PostgreSQL.
"""

import contextlib
import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import fresh_store
from kit_targets import typescript_server
from node_packages import typescript_built
from oauth import (
    CHARGE,
    EVERY_SCOPE,
    METADATA,
    READ,
    Issuer,
    as_caller,
    bearer,
    challenge,
    metadata_of,
    scope_of,
    start_protected,
)
from stores import decisions, execute, read_store
from wire import CONFLICT, SDK2_SERVER, STORE_FULL, error_type, free_port, keyed_call_line, sdk2_python, start, text_of

pytestmark = pytest.mark.targets("2x-http")

JWKS_REFETCH_SECONDS = 5.0  # mcp_idempotency/auth.py: an unknown kid fetches the keys again at most this often


# P9's bound, counted over every principal's records: the six that Alice's and Bob's first
# calls leave, and room for one more.
BOUND = 7


@contextlib.contextmanager
def deployment(issuer: Issuer, store: str, instances: int, token: str):
    """One or two instances trusting `issuer` on one store, bounded; the first takes a second over each charge."""
    bounded = ("--store", store, "--max-records", str(BOUND))
    command_lines = [(*bounded, "--charge-delay", "0.5" if instances == 2 else "0.3"), bounded]
    with ThreadPoolExecutor(instances) as pool:
        wires = list(pool.map(lambda args: start_protected(issuer, *args, token=token), command_lines[:instances]))
    try:
        yield wires[0], wires[-1]
    finally:
        for wire in wires:
            wire.close()


# ----------------------------------------------------------------------------
# K2, P21: another principal's key is a new key, and nothing about it shows
# ----------------------------------------------------------------------------

BOBS_KEYS = ("order-1", "order-2", "order-3", "order-4")
OTHER_KEYS = ("other-1", "other-2", "other-3", "other-4")  # Alice's instead, in the world where nobody shares Bob's


def bobs_answers(issuer: Issuer, a, b, alices_keys: tuple[str, ...]) -> tuple[list[str], dict]:
    """Alice calls with her keys on A; then Bob, on B, with his; Bob's answers without their ids, and the ledger."""
    alice, bob = issuer.token("alice"), issuer.token("bob")
    as_caller(a, alice)
    keyed_call_line(a, "charge_guarded", {"amount": 100}, alices_keys[0])  # completed, the arguments Bob will send
    keyed_call_line(a, "charge_guarded", {"amount": 30}, alices_keys[1])  # completed, other arguments than Bob's
    as_caller(b, bob)
    answers = [
        keyed_call_line(b, "charge_guarded", {"amount": amount}, key)[1]
        for amount, key in [
            (100, BOBS_KEYS[0]),  # his own execution, not her result
            (100, BOBS_KEYS[0]),  # his own replay
            (250, BOBS_KEYS[0]),  # a conflict with his own call
            (70, BOBS_KEYS[1]),  # her key with other arguments: no conflict
        ]
    ]
    as_caller(a, alice)
    running = a.send_call("charge_guarded", {"amount": 40}, key=alices_keys[2])
    a.wait_for_log(f"claimed: key='{alices_keys[2]}'")
    as_caller(b, bob)
    answers.append(keyed_call_line(b, "charge_guarded", {"amount": 50}, BOBS_KEYS[2])[1])  # her key while her call runs
    assert "result" in a.reply(running)
    as_caller(a, alice)
    keyed_call_line(a, "charge_guarded", {"amount": 20}, alices_keys[3])  # the last room under the bound
    as_caller(b, bob)
    answers.append(
        keyed_call_line(b, "charge_guarded", {"amount": 20}, BOBS_KEYS[3])[1]
    )  # her key, her arguments: full
    return answers, b.ledger()


@pytest.mark.parametrize(
    ("kind", "instances"),
    [
        ("memory", 1),  # the quick set; the others, across instances too, in the slow set (CI runs both)
        pytest.param("sqlite", 1, marks=pytest.mark.slow),
        pytest.param("sqlite", 2, marks=pytest.mark.slow),
        pytest.param("postgresql", 1, marks=pytest.mark.slow),
        pytest.param("postgresql", 2, marks=pytest.mark.slow),
    ],
)
def test_another_principal_sending_a_used_key_gets_exactly_what_it_gets_had_nobody_used_it(
    issuer, kind, instances, tmp_path
):
    token = issuer.token("alice", READ)
    with fresh_store(kind, tmp_path, "used") as store, deployment(issuer, store, instances, token) as (a, b):
        used, ledger_used = bobs_answers(issuer, a, b, BOBS_KEYS)
        seen = decisions(*dict.fromkeys((a, b)))  # one instance may be both
    with fresh_store(kind, tmp_path, "unused") as store, deployment(issuer, store, instances, token) as (a, b):
        unused, ledger_unused = bobs_answers(issuer, a, b, OTHER_KEYS)

    assert used == unused  # byte for byte, ids aside: Alice's use of the keys shows nowhere
    assert ledger_used == ledger_unused == {"balance": 100 + 30 + 40 + 20 + 100 + 70 + 50, "charges": 7}
    first, replay, conflict, other_arguments, while_running, full = (json.loads("{" + answer) for answer in used)
    assert text_of(first) == "Charged 100. New balance: 230"  # after Alice's 100 and 30: his own charge
    assert replay == first
    assert error_type(conflict) == CONFLICT and conflict["error"]["data"]["idempotencyKey"] == BOBS_KEYS[0]
    assert text_of(other_arguments).startswith("Charged 70.")
    assert text_of(while_running).startswith("Charged 50.")
    # P9 counts every principal's records: Alice's filled the bound, in both worlds alike.
    assert full["error"]["data"] == {"type": STORE_FULL, "retryable": True, "idempotencyKey": BOBS_KEYS[3]}
    assert seen["claimed", BOBS_KEYS[0]] == seen["claimed", BOBS_KEYS[2]] == 2  # Alice's, then Bob's own
    assert seen["claimed", BOBS_KEYS[3]] == seen["store full", BOBS_KEYS[3]] == 1  # Alice's; Bob's refused
    assert seen["replayed", BOBS_KEYS[0]] == 1 and seen["conflict", BOBS_KEYS[0]] == 1  # both his own
    assert seen["in progress", BOBS_KEYS[2]] == 0


# ----------------------------------------------------------------------------
# K3, P22: a replay passes the authorisation in force when it is made
# ----------------------------------------------------------------------------

LIFETIME = 3  # seconds a short-lived access token is valid


def test_replay_with_a_narrowed_or_expired_token_is_refused_and_the_record_stays_for_a_proper_retry(tmp_path):
    key = str(tmp_path / "key.json")
    issuer = Issuer("--key", key)
    short_lived = Issuer("--key", key, "--issuer", issuer.url, "--lifetime", str(LIFETIME))  # the same authority
    store = f"sqlite:{tmp_path / 'store.db'}"
    try:
        with deployment(issuer, store, 2, issuer.token("alice", READ)) as (a, b):
            full = short_lived.token("alice")
            issued = time.monotonic()
            as_caller(a, full)
            original = keyed_call_line(a, "charge_guarded", {"amount": 100}, "order-1")[1]
            call = {
                "jsonrpc": "2.0",
                "id": "again",
                "method": "tools/call",
                "params": {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": "order-1"},
            }
            body = json.dumps(b.frame(call)).encode()

            narrowed = b.post(body, {**b.headers(call), **bearer(issuer.token("alice", READ))})
            time.sleep(max(0.0, issued + LIFETIME + 1.5 - time.monotonic()))
            expired = b.post(body, {**b.headers(call), **bearer(full)})

            for (status, headers, text), wanted in zip(
                (narrowed, expired),
                (
                    (403, "insufficient_scope", CHARGE),  # the scope for this call only
                    (401, "invalid_token", EVERY_SCOPE),
                ),
                strict=True,
            ):
                assert (status, challenge(headers), scope_of(headers)) == wanted, text
                assert metadata_of(headers) == METADATA
                assert "Charged" not in text  # the recorded result is not disclosed
            seen = decisions(a, b)
            assert seen["claimed", "order-1"] == 1 and seen["replayed", "order-1"] == 0  # the store was not consulted
            ledger, records, _ = read_store(store)
            assert ledger == {"balance": 100, "charges": 1}
            assert list(records) == [json.dumps([issuer.url, "alice", "order-1"])]  # Alice's one record, no other

            as_caller(b, issuer.token("alice"))
            assert keyed_call_line(b, "charge_guarded", {"amount": 100}, "order-1")[1] == original
            assert decisions(a, b)["replayed", "order-1"] == 1
            assert b.ledger() == {"balance": 100, "charges": 1}
    finally:
        issuer.close()
        short_lived.close()


# ----------------------------------------------------------------------------
# The issuer's keys: fetched once, cached, fetched again for an unknown kid
# ----------------------------------------------------------------------------


@pytest.mark.slow  # about 10 s, most of it waiting out the refetch window
def test_keys_are_fetched_once_and_again_only_for_an_unknown_kid(tmp_path):
    first_key, second_key = str(tmp_path / "first.json"), str(tmp_path / "second.json")
    issuer = Issuer("--key", first_key)
    wire = start_protected(issuer, token=issuer.token("alice"))
    try:
        for client in ["alice", "bob"] * 5:
            as_caller(wire, issuer.token(client))
            wire.charge(1, key=f"{client}-{time.monotonic_ns()}")
        fetched_at = time.monotonic()
        assert issuer.jwks_fetches() == 1  # twenty requests with ten tokens: one fetch

        # A key rollover: the issuer restarts on its URL, signs with a new key, publishes both.
        issuer.close()
        issuer = Issuer("--key", first_key, "--key", second_key, port=issuer.port)
        time.sleep(max(0.0, fetched_at + JWKS_REFETCH_SECONDS + 0.5 - time.monotonic()))
        as_caller(wire, issuer.token("alice"))  # signed with the new key: a kid the server has not seen
        assert "result" in wire.charge(1, key="after-rollover")
        refetched_at = time.monotonic()
        assert issuer.jwks_fetches() == 1
        for client in ["alice", "bob"] * 5:
            as_caller(wire, issuer.token(client))
            assert "result" in wire.charge(1, key=f"{client}-{time.monotonic_ns()}")
        assert issuer.jwks_fetches() == 1  # known again: no more fetches

        # Unknown kids in a burst (an impostor under the issuer's name): at most one fetch a window, here none.
        impostor = Issuer("--key", str(tmp_path / "impostor.json"), "--issuer", issuer.url)
        try:
            for _ in range(5):
                status, _, _ = wire.post(b"{}", {**wire.headers({}), **bearer(impostor.token("alice"))})
                assert status == 401
        finally:
            impostor.close()
        assert time.monotonic() - refetched_at < JWKS_REFETCH_SECONDS, "too slow to tell a refetch from a window"
        assert issuer.jwks_fetches() == 1
    finally:
        wire.close()
        issuer.close()


# ----------------------------------------------------------------------------
# Without authorisation: one tenant, said at start; loopback only unless on purpose
# ----------------------------------------------------------------------------


@pytest.mark.targets("2x-stdio", "2x-http")
def test_server_without_authorisation_says_at_start_that_it_serves_one_tenant(wire):
    assert "serving one tenant" in wire.log()


def test_typescript_server_says_at_start_that_it_serves_one_tenant(spawn_typescript):
    """It has no authorisation at all: on stdio its one client, over HTTP (below) every client."""
    assert "serving one tenant: this process's one client" in spawn_typescript().log()


def compiled_typescript_server() -> list[str]:
    """The TypeScript server's command, once typescript/server.ts is compiled."""
    typescript_built()
    return typescript_server()


# Each server without authorisation: the 2.x ledger server, and the TypeScript server, which has none to give.
UNAUTHENTICATED = {
    "2.x": lambda: [sdk2_python(), *SDK2_SERVER, "--placement", "params", "--store", "memory"],
    "TypeScript": compiled_typescript_server,
}


@pytest.mark.parametrize("server", UNAUTHENTICATED)
def test_non_loopback_address_without_authorisation_is_refused_unless_asked_for_on_purpose(server):
    command = [*UNAUTHENTICATED[server](), "--transport", "http", "--host", "0.0.0.0", "--port", str(free_port())]

    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]  # one line
    assert refused.stderr.startswith("refusing to listen on 0.0.0.0 without authorisation")
    served = subprocess.Popen([*command, "--allow-unauthenticated"], stderr=subprocess.PIPE, text=True)
    try:
        lines = [served.stderr.readline() for _ in range(2)]
        assert "serving one tenant" in lines[1], lines
    finally:
        served.terminate()
        served.wait(timeout=30)


# ----------------------------------------------------------------------------
# Existing stores: a record of the previous version holds a bare key
# ----------------------------------------------------------------------------


def test_record_of_the_previous_version_with_a_bare_key_replays_to_nobody(issuer, store_url):
    wire = start("2x-http", "--store", store_url)
    assert text_of(wire.charge(100, key="order-1")) == "Charged 100. New balance: 100"
    wire.close()
    # What the previous version wrote: the same record, under the bare key.
    assert execute(store_url, "UPDATE idempotency_records SET key = 'order-1'") == 1

    one_tenant = start("2x-http", "--store", store_url)
    try:
        assert text_of(one_tenant.charge(100, key="order-1")) == "Charged 100. New balance: 200"
    finally:
        one_tenant.close()
    alice = start_protected(issuer, "--store", store_url, token=issuer.token("alice", f"{CHARGE} {READ}"))
    try:
        assert text_of(alice.charge(100, key="order-1")) == "Charged 100. New balance: 300"
        assert alice.ledger() == {"balance": 300, "charges": 3}
    finally:
        alice.close()
