"""P9', K2, P21: one principal's share of the store, and forgetting one principal's records.

In the stores themselves, on memory, SQLite and PostgreSQL: a principal that holds its
share of live records is refused a new key, and no other principal is; a record that
expires frees its place; on PostgreSQL, claims that arrive together never overfill a
share. `forget` deletes one principal's records and no other's, and gives their places
back to the shared bound.

Over HTTP with real OAuth tokens (the issuer and the 2.x ledger server as subprocesses):
Alice filling her share leaves Bob's answers exactly what they are had she never used
the store, his own share's store-full included; `mcp-idempotency-store forget`, run
beside two instances on one store, makes Alice's keys run anew and leaves Bob's
replaying; and run while a charge of hers is still running, it fences that charge off.
"""

import contextlib
import json
import subprocess

import anyio
import pytest
from conftest import FakeClock, fresh_store
from oauth import READ, as_caller, parts, start_protected
from wire import IN_PROGRESS, STORE_FULL, error_type, keyed_call_line, sdk2_python, text_of

from mcp_idempotency.rules import principal_name
from mcp_idempotency.stores import Full, Held, Limits, Won, memory, postgres, sqlite

pytestmark = pytest.mark.targets("2x-http")

ALICE, BOB = principal_name(("alice",)), principal_name(("bob",))
FINGERPRINT = b"the request"
WINDOW = 1.0  # seconds: the retention and the lease of the stores below
SHARE, BOUND = 3, 10  # each principal's share, and the store's
SLOW = pytest.mark.slow  # the quick set has one store of each server-level test; CI runs every one


# ----------------------------------------------------------------------------
# In the stores
# ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def a_store(kind: str, request, tmp_path, share: int = SHARE):
    """A store of `kind` with a one-second window, a share of `share` and a bound of BOUND; its clock (None: real)."""
    limits = Limits(retention=WINDOW, lease=WINDOW, max_records=BOUND, max_records_per_principal=share)
    clock = FakeClock()
    if kind == "postgresql":
        store, clock = await postgres.PostgresStore.open(request.getfixturevalue("postgres_url"), limits), None
    elif kind == "sqlite":
        store = sqlite.SQLiteStore(str(tmp_path / "store.db"), limits, clock)
    else:
        store = memory.MemoryStore(limits, clock)
    try:
        yield store, clock
    finally:
        await store.close()


async def completed(store, key: str, principal: str) -> object:
    """Claim `key` for `principal` and complete it, as a keyed call does; what the claim answered."""
    claim = await store.claim(key, FINGERPRINT, principal)
    if isinstance(claim, Won):
        async with store.transaction() as tx:
            tx.complete(key, FINGERPRINT, f"done {key}")
    return claim


async def let_pass(clock, seconds: float) -> None:
    """Move the fake clock, or wait on the real one (PostgreSQL's, P19)."""
    if clock is None:
        await anyio.sleep(seconds)
    else:
        clock.advance(seconds)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
async def test_a_principal_holding_its_share_is_refused_a_new_key_and_no_other_principal_is(kind, request, tmp_path):
    async with a_store(kind, request, tmp_path) as (store, clock):
        for n in range(SHARE):
            assert isinstance(await completed(store, f"alice {n}", ALICE), Won)
        assert await store.claim("alice new", FINGERPRINT, ALICE) == Full()  # her share, not the store, is full
        assert await store.claim("alice 0", FINGERPRINT, ALICE) == Held(FINGERPRINT, "done alice 0")  # still replays
        assert isinstance(await store.claim("bob 0", FINGERPRINT, BOB), Won)  # Bob's share is his own
        await let_pass(clock, WINDOW * 1.5)  # her records expire: their places are free at once, unpurged
        assert isinstance(await store.claim("alice new", FINGERPRINT, ALICE), Won)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
async def test_a_running_claim_counts_against_its_principals_share_until_given_back(kind, request, tmp_path):
    async with a_store(kind, request, tmp_path, share=1) as (store, _):
        running = await store.claim("alice 0", FINGERPRINT, ALICE)
        assert isinstance(running, Won)
        assert await store.claim("alice 1", FINGERPRINT, ALICE) == Full()
        await store.release("alice 0", running.owner)
        assert isinstance(await store.claim("alice 1", FINGERPRINT, ALICE), Won)


@pytest.mark.anyio
async def test_claims_of_one_principal_arriving_together_never_overfill_its_share(postgres_url):
    """P9', P16: on PostgreSQL, twenty new keys of one principal claimed at once: exactly her share wins."""
    limits = Limits(retention=60, lease=60, max_records=BOUND * 10, max_records_per_principal=SHARE)
    store = await postgres.PostgresStore.open(postgres_url, limits)
    answers = []

    async def claim(key: str) -> None:
        answers.append(await store.claim(key, FINGERPRINT, ALICE))

    try:
        async with anyio.create_task_group() as tasks:
            for n in range(20):
                tasks.start_soon(claim, f"alice {n}")
        assert isinstance(await store.claim("bob 0", FINGERPRINT, BOB), Won)
    finally:
        await store.close()
    assert sum(isinstance(answer, Won) for answer in answers) == SHARE
    assert sum(answer == Full() for answer in answers) == 20 - SHARE


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
async def test_forget_deletes_one_principals_records_and_gives_their_places_back(kind, request, tmp_path):
    async with a_store(kind, request, tmp_path, share=BOUND) as (store, _):
        await completed(store, "alice 0", ALICE)
        assert isinstance(await store.claim("alice 1", FINGERPRINT, ALICE), Won)  # running: forgotten too
        for n in range(BOUND - 2):
            await completed(store, f"bob {n}", BOB)
        assert await store.claim("bob new", FINGERPRINT, BOB) == Full()  # the store is full

        assert await store.forget(ALICE) == 2
        assert await store.forget(ALICE) == 0
        assert isinstance(await store.claim("alice 0", FINGERPRINT, ALICE), Won)  # her key is new again
        assert await store.claim("bob 0", FINGERPRINT, BOB) == Held(FINGERPRINT, "done bob 0")  # his, untouched
        assert isinstance(await store.claim("bob new", FINGERPRINT, BOB), Won)  # her second place is his now


# ----------------------------------------------------------------------------
# Over HTTP, with real tokens
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def shared_by_two(issuer, store: str, token: str, *options: str):
    """Two instances of the 2.x ledger server trusting `issuer` on one store, each with `options`."""
    servers = ("--store", store, "--max-records", str(BOUND), "--max-records-per-principal", str(SHARE), *options)
    a = start_protected(issuer, *servers, token=token)
    try:
        b = start_protected(issuer, *servers, token=token)
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


def bobs_answers(issuer, a, b, alice_keys_hers: bool) -> tuple[list[str], dict]:
    """Alice charges on A, with keys until her share is full (or with none); then Bob, on B, fills his share;
    his answers without their ids, and the ledger."""
    as_caller(a, issuer.token("alice"))
    for n in range(SHARE):
        if alice_keys_hers:
            keyed_call_line(a, "charge_guarded", {"amount": 1}, f"alice-{n}")
        else:
            a.call("charge_guarded", {"amount": 1})  # the same charge, no record: the store never hears of her
    if alice_keys_hers:
        refused = json.loads("{" + keyed_call_line(a, "charge_guarded", {"amount": 1}, "alice-new")[1])
        assert refused["error"]["data"]["type"] == STORE_FULL  # her share: the store has room for seven more
    as_caller(b, issuer.token("bob"))
    answers = [keyed_call_line(b, "charge_guarded", {"amount": 10}, f"order-{n}")[1] for n in range(SHARE + 1)]
    answers.append(keyed_call_line(b, "charge_guarded", {"amount": 10}, "order-0")[1])  # his replay, when full
    return answers, b.ledger()


@pytest.mark.parametrize("kind", ["memory", pytest.param("sqlite", marks=SLOW), pytest.param("postgresql", marks=SLOW)])
def test_alice_filling_her_share_leaves_bobs_answers_exactly_as_had_she_never_used_the_store(issuer, kind, tmp_path):
    """P9', P21: byte for byte, ids aside, his own store-full at his own share included; across two instances
    where the store is shared (memory: one instance, twice). In the other world she charges the same, unkeyed."""
    token = issuer.token("alice", READ)
    worlds = {}
    for alice_keys_hers in (True, False):
        with (
            fresh_store(kind, tmp_path, f"alice-{alice_keys_hers}") as store,
            shared_by_two(issuer, store, token) as (a, b),
        ):
            worlds[alice_keys_hers] = bobs_answers(issuer, a, b if kind != "memory" else a, alice_keys_hers)
    (with_alice, ledger_with), (without_alice, ledger_without) = worlds[True], worlds[False]
    assert with_alice == without_alice
    assert ledger_with == ledger_without == {"balance": SHARE * 1 + SHARE * 10, "charges": SHARE * 2}
    answers = [json.loads("{" + answer) for answer in with_alice]
    assert [text_of(answer).split(".")[0] for answer in answers[:SHARE]] == ["Charged 10"] * SHARE
    full = {"type": STORE_FULL, "retryable": True, "idempotencyKey": f"order-{SHARE}"}
    assert answers[SHARE]["error"]["data"] == full
    assert answers[-1] == answers[0]  # a replay still answers at his share


def forget(store: str, *principal: str) -> subprocess.CompletedProcess:
    """`mcp-idempotency-store forget STORE PRINCIPAL...`, as an operator runs it beside the servers."""
    command = [sdk2_python(), "-m", "mcp_idempotency.stores.command", "forget", store, *principal]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=SLOW)])
def test_forgetting_alice_makes_her_keys_run_anew_on_every_instance_and_leaves_bobs_replaying(issuer, kind, tmp_path):
    token = issuer.token("alice", READ)
    alice, bob = issuer.token("alice"), issuer.token("bob")
    with fresh_store(kind, tmp_path, "forget") as store, shared_by_two(issuer, store, token) as (a, b):
        as_caller(a, alice)
        alices = [
            text_of(json.loads("{" + keyed_call_line(a, "charge_guarded", {"amount": 1}, key)[1]))
            for key in ("order-1", "order-2")
        ]
        as_caller(a, bob)
        bobs = keyed_call_line(a, "charge_guarded", {"amount": 10}, "order-1")[1]
        claims = parts(alice)[1]

        forgotten = forget(store, claims["iss"], claims["sub"])
        assert forgotten.returncode == 0, forgotten.stderr
        assert forgotten.stdout.startswith(f"forgot 2 record(s) of {principal_name((claims['iss'], claims['sub']))}")

        as_caller(b, alice)
        again = [
            text_of(json.loads("{" + keyed_call_line(b, "charge_guarded", {"amount": 1}, key)[1]))
            for key in ("order-1", "order-2")
        ]
        as_caller(b, bob)
        assert keyed_call_line(b, "charge_guarded", {"amount": 10}, "order-1")[1] == bobs  # replayed, not run
        ledger = b.ledger()
    assert again != alices and all(text.startswith("Charged 1.") for text in again)  # run anew, not replayed
    assert ledger == {"balance": 1 + 1 + 10 + 1 + 1, "charges": 5}


CHARGE_SECONDS = 4  # long enough for the operator's command to start and finish while the charge runs


def test_forgetting_alice_while_her_charge_runs_rolls_it_back_tells_her_in_progress_and_her_retry_charges_once(
    issuer, tmp_path
):
    """The running record goes with the rest; the charge, finding it gone as it commits, is fenced off (P18)."""
    alice = issuer.token("alice")
    claims = parts(alice)[1]
    store = f"sqlite:{tmp_path / 'store.db'}"
    server = start_protected(issuer, "--store", store, "--charge-delay", str(CHARGE_SECONDS), token=alice)
    try:
        running = server.send_call("charge_guarded", {"amount": 7}, "order-1")
        server.wait_for_log("claimed: key='order-1'")
        forgotten = forget(store, claims["iss"], claims["sub"])
        forgotten_while_running = not server.answered(running)
        answered = server.reply(running, timeout=CHARGE_SECONDS * 5)
        after_the_fence = server.ledger()
        retried = server.call("charge_guarded", {"amount": 7}, "order-1")
        replayed = server.call("charge_guarded", {"amount": 7}, "order-1")
        after_the_retry = server.ledger()
    finally:
        server.close()
    assert forgotten.returncode == 0, forgotten.stderr
    assert forgotten.stdout.startswith("forgot 1 record(s)"), forgotten.stdout  # the running one
    assert forgotten_while_running, "the charge was answered before the command had forgotten its record"
    assert error_type(answered) == IN_PROGRESS, answered  # told to come back, not told it was charged
    assert after_the_fence == {"balance": 0, "charges": 0}  # its charge rolled back with the commit it lost
    assert text_of(retried) == "Charged 7. New balance: 7"  # run anew
    assert replayed == {**retried, "id": replayed["id"]}  # and recorded: the next retry replays it
    assert after_the_retry == {"balance": 7, "charges": 1}


def test_forget_on_a_store_that_is_not_there_says_so_in_one_line_and_makes_none(tmp_path):
    missing = tmp_path / "missing.db"
    forgotten = forget(f"sqlite:{missing}", "one tenant")
    assert forgotten.returncode == 1 and not missing.exists()
    assert forgotten.stderr.strip() == f"cannot forget a principal in the store sqlite:{missing}: " + (
        f"FileNotFoundError: no such file: {missing}"
    )
