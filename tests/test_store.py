"""P8, P9, P16, P17, P18 in mcp_idempotency/stores/ itself: each store in this process, spoken to as the
2.x server's dispatch layer speaks to it.

The memory and SQLite stores read a clock they are given, so a fake one moves their
windows without sleeping. PostgreSQL keeps time on the database's clock (P19): there
the windows are a second long and the test waits them out.

Replay, takeover, the bound's purge, forgetting and the share, step by step on every
store, are the rows of tests/test_store_rules.py; here is the rest.
"""

import subprocess

import anyio
import pytest
from conftest import FakeClock
from stores import execute
from wire import SDK2_SERVER, sdk2_python

from mcp_idempotency.stores import Full, Held, Limits, StoreUnavailable, Won, may_take, memory, postgres, sqlite
from mcp_idempotency_demo import ledger as the_ledger

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

WINDOW = 1.0  # seconds: the retention and the lease in these tests
FINGERPRINT, OTHER = b"the request", b"another request"
ALICE, BOB = '["alice"]', '["bob"]'  # principals as the layer names them (rules.principal_name)


class Opened:
    """A store under test, and how to let its windows pass."""

    def __init__(self, store, clock: FakeClock | None):
        self.store, self.clock = store, clock

    async def wait_out(self, seconds: float) -> None:
        """Let `seconds` pass on the store's clock: move the fake one, or wait on the real one."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await anyio.sleep(seconds)


STORES = ["memory", "sqlite", "postgresql"]


async def open_one(kind: str, limits: Limits, request, tmp_path) -> Opened:
    """A store of `kind` holding the demo's ledger, as the ledger server opens it."""
    if kind == "postgresql":
        opened = Opened(await postgres.PostgresStore.open(request.getfixturevalue("postgres_url"), limits), None)
    else:
        clock = FakeClock()
        opened = Opened(
            memory.MemoryStore(limits, clock)
            if kind == "memory"
            else sqlite.SQLiteStore(str(tmp_path / "store.db"), limits, clock),
            clock,
        )
    await with_ledger(opened.store)
    return opened


async def with_ledger(store) -> None:
    """The demo's ledger in `store`, as the ledger server makes it at start: the store itself has none."""
    async with store.transaction() as tx:
        await the_ledger.create(tx)


@pytest.fixture(params=STORES)
async def opened(request, tmp_path):
    """Each store with a one-second retention and lease, and room for two records."""
    opened = await open_one(request.param, Limits(retention=WINDOW, lease=WINDOW, max_records=2), request, tmp_path)
    yield opened
    await opened.store.close()


async def charged(store, key: str, amount: int = 100, fingerprint: bytes = FINGERPRINT) -> bool:
    """A keyed charge's unit of work as the server runs it: the charge, then commit with the record."""
    async with store.transaction() as tx:
        await the_ledger.charge(tx, amount)
        tx.complete(key, fingerprint, f"charged {amount}")
    return tx.completed


async def ledger(store) -> dict:
    async with store.transaction() as tx:
        return await the_ledger.read(tx)


async def test_a_key_claimed_by_many_tasks_at_once_is_won_once(opened):
    claims = []

    async def claim():
        claims.append(await opened.store.claim("k", FINGERPRINT, ALICE))

    async with anyio.create_task_group() as tasks:
        for _ in range(20):
            tasks.start_soon(claim)

    assert sum(isinstance(claim, Won) for claim in claims) == 1
    assert all(claim == Held(FINGERPRINT, None) for claim in claims if not isinstance(claim, Won))


async def test_a_completion_for_another_request_under_the_key_is_fenced_off(opened):
    """P18: a key that expired and was claimed by another request is not completed by the old one."""
    store = opened.store
    await store.claim("k", FINGERPRINT, ALICE)
    assert not await charged(store, "k", fingerprint=OTHER)
    assert await ledger(store) == {"balance": 0, "charges": 0}


# Texts a literal could be broken by: quotes, backslashes, PostgreSQL's dollar quotes and the tag the store
# quotes with (alone, and cut where the literal's end would join it), beside characters outside ASCII.
AWKWARD = "it's \\ \" $$ $idempotency$ $idempotency_$ \u00e9\u4e2d\U0001f600 $idempotency"


async def test_an_outcome_and_a_key_holding_any_text_are_recorded_and_replayed_as_they_were(opened):
    """The completion sent with the commit carries its values in the statement's text on PostgreSQL: whatever
    they hold, a retry reads back the outcome that was recorded, under the key that was sent."""
    store = opened.store
    key = f"k {AWKWARD}"
    await store.claim(key, FINGERPRINT, ALICE)
    async with store.transaction() as tx:
        await the_ledger.charge(tx, 100)
        tx.complete(key, FINGERPRINT, AWKWARD)
    assert tx.completed
    assert await store.claim(key, FINGERPRINT, ALICE) == Held(FINGERPRINT, AWKWARD)
    assert await ledger(store) == {"balance": 100, "charges": 1}


async def test_a_released_claim_lets_the_same_key_run_again_and_only_its_owner_may_release_it(opened):
    """P6': -32042 asks the client to send the request again: its claim is given back, not recorded."""
    store = opened.store
    first = await store.claim("k", FINGERPRINT, ALICE)
    await store.release("k", "someone else")  # not the owner: nothing changes
    assert await store.claim("k", FINGERPRINT, ALICE) == Held(FINGERPRINT, None)

    await store.release("k", first.owner)
    second = await store.claim("k", FINGERPRINT, ALICE)
    assert isinstance(second, Won) and second.owner != first.owner
    await store.release("k", first.owner)  # a stale owner cannot release the new claim
    assert await charged(store, "k")
    await store.release("k", second.owner)  # nor can anyone release a completed record
    assert await store.claim("k", FINGERPRINT, ALICE) == Held(FINGERPRINT, "charged 100")

    await store.claim("b", FINGERPRINT, ALICE)  # P9: a released key left no record behind to count
    assert await store.claim("c", FINGERPRINT, ALICE) == Full()


async def test_a_record_completed_late_in_its_lease_replays_for_a_whole_window_after_its_completion(opened):
    """P8: retention runs from the completion, not from the claim (issue 16, finding 9)."""
    store = opened.store
    await store.claim("k", FINGERPRINT, ALICE)
    await opened.wait_out(WINDOW * 0.7)  # late in the lease
    assert await charged(store, "k")
    await opened.wait_out(WINDOW * 0.7)  # past a window from the claim, inside one from the completion
    assert await store.claim("k", FINGERPRINT, ALICE) == Held(FINGERPRINT, "charged 100")
    await opened.wait_out(WINDOW * 0.5)
    assert isinstance(await store.claim("k", FINGERPRINT, ALICE), Won)


async def test_a_nested_unit_of_work_that_fails_undoes_its_own_writes_only(opened):
    """P17: a tool that catches its own error commits, keyed, exactly what it commits unkeyed:
    its nested transaction is a savepoint (issue 16, finding 4)."""
    store = opened.store

    async def tool() -> None:
        """Charge 1; then, in a nested unit of work, charge 10 and fail; catch it."""
        async with store.transaction() as tx:
            await the_ledger.charge(tx, 1)
        with pytest.raises(RuntimeError):
            async with store.transaction() as tx:
                await the_ledger.charge(tx, 10)
                raise RuntimeError("the processor declined after the write")

    await tool()  # unkeyed: each unit of work on its own
    assert await ledger(store) == {"balance": 1, "charges": 1}

    await store.claim("k", FINGERPRINT, ALICE)
    async with store.transaction() as tx:  # keyed: the dispatch layer's unit of work around the tool
        await tool()
        tx.complete("k", FINGERPRINT, "done")
    assert tx.completed
    assert await ledger(store) == {"balance": 2, "charges": 2}


# P8, P18: each kind of record a claim can meet, past or within its deadline, by the same
# request or another: (status, deadline passed, same fingerprint).
TAKEOVER_CASES = [
    (status, passed, same) for status in ("running", "completed") for passed in (True, False) for same in (True, False)
]
# Where the key is taken: an expired record, by any request; a passed lease, by the same request only.
TAKEN = {("completed", True, True), ("completed", True, False), ("running", True, True)}


@pytest.mark.parametrize("kind", STORES)
async def test_every_store_takes_a_key_exactly_where_the_takeover_rule_says(kind, request, tmp_path):
    """P8, P18: the rule is stated once, `may_take` in stores/__init__.py, and copied into SQL where it must
    be atomic (SQLite's CLAIM, PostgreSQL's idempotency_claim): each store's claim agrees with it, case by
    case, and so does SQLite's claim statement on its own, without the read before it."""
    # Two seconds on PostgreSQL's real clock (P19): a record within its deadline is checked at once, and
    # every statement may take up to a lease (command_timeout) on a loaded machine.
    window = 2 * WINDOW
    opened = await open_one(kind, Limits(retention=window, lease=window, max_records=100), request, tmp_path)
    store = opened.store

    async def record(case: tuple) -> None:
        """Under each of the case's two keys, a record of the case's status, for the request FINGERPRINT."""
        for key in (f"claim {case}", f"take {case}"):
            assert isinstance(await store.claim(key, FINGERPRINT, ALICE), Won)
            if case[0] == "completed":
                assert await charged(store, key)

    try:
        for case in TAKEOVER_CASES:  # first the records whose deadline is to pass
            if case[1]:
                await record(case)
        await opened.wait_out(window * 1.2)
        for case in TAKEOVER_CASES:
            status, passed, same = case
            if not passed:  # made just before it is checked, well within its deadline
                await record(case)
            fingerprint = FINGERPRINT if same else OTHER
            expected = may_take(status, FINGERPRINT, passed, fingerprint)
            assert expected == (case in TAKEN), case
            claim = await store.claim(f"claim {case}", fingerprint, ALICE)
            assert isinstance(claim, Won) == expected, (case, claim)
            if kind == "sqlite":  # the CLAIM statement decides alone here: the read before it is skipped
                taken = store.take(store.on_loop, f"take {case}", fingerprint, ALICE, store.clock())
                assert isinstance(taken, Won) == expected, ("CLAIM", case, taken)
    finally:
        await store.close()


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
async def test_claims_and_completions_at_once_under_any_default_isolation_level_never_fail(isolation, postgres_url):
    """P16, P23: the level is pinned in code, so a server whose default is stricter raises no
    serialization failure at the client, and each key is won and charged once (issue 16, finding 5)."""
    import asyncpg

    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute(
            f"ALTER DATABASE {postgres_url.rsplit('/', 1)[1]} SET default_transaction_isolation = '{isolation}'"
        )
    finally:
        await admin.close()
    store = await postgres.PostgresStore.open(postgres_url, Limits(retention=60, lease=30, max_records=1000))
    await with_ledger(store)
    won = []

    async def claim_and_complete(key: str) -> None:
        claim = await store.claim(key, FINGERPRINT, ALICE)
        if isinstance(claim, Won):
            won.append(key)
            assert await charged(store, key)

    try:
        async with anyio.create_task_group() as tasks:
            for i in range(40):
                tasks.start_soon(claim_and_complete, f"key-{i % 10}")
        assert sorted(won) == sorted(f"key-{i}" for i in range(10))
        assert await ledger(store) == {"balance": 1000, "charges": 10}
    finally:
        await store.close()


async def test_an_interleaved_claim_on_two_sqlite_stores_is_won_once(tmp_path):
    """P16: the write under the lock re-decides; it never trusts the read made before it
    (issue 16, finding 9: one store reads the key as free, another claims it, the first then writes)."""
    limits = Limits(retention=WINDOW, lease=WINDOW, max_records=10)
    first, second = (sqlite.SQLiteStore(str(tmp_path / "store.db"), limits, FakeClock()) for _ in range(2))
    try:
        assert first.on_loop.execute(sqlite.HOLDER, {"key": "k", "now": first.clock()}).fetchone() is None  # free
        won = await second.claim("k", FINGERPRINT, ALICE)
        assert first.take(first.on_loop, "k", FINGERPRINT, ALICE, first.clock()) == Held(FINGERPRINT, None)
        assert isinstance(won, Won)
    finally:
        await first.close()
        await second.close()


async def test_the_sqlite_writer_syncs_every_commit_to_disk(tmp_path):
    """P17: a completion the client was told about survives power loss: synchronous=FULL on the
    connection that commits completions (issue 16, finding 6; NORMAL may lose the last commits)."""
    store = sqlite.SQLiteStore(str(tmp_path / "store.db"), Limits(retention=1, lease=1, max_records=1))
    try:
        assert store.writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        await store.close()


BAD_STORES = [
    pytest.param("redis://127.0.0.1/0", "unknown store", id="unknown-scheme"),
    pytest.param(
        "sqlite:/no/such/folder/store.db",
        "there is no folder /no/such/folder for the SQLite file: create it, or point the store elsewhere",
        id="sqlite-folder-missing",
    ),
    pytest.param(
        "postgresql://postgres@127.0.0.1:1/none", "no PostgreSQL answers at 127.0.0.1:1 (", id="postgresql-refused"
    ),
]


@pytest.mark.parametrize(("url", "said"), BAD_STORES)
def test_a_store_that_cannot_be_opened_stops_the_server_with_one_line(url, said):
    refused = subprocess.run(
        [sdk2_python(), *SDK2_SERVER, "--placement", "params", "--store", url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert refused.returncode == 1 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"cannot open the store {url}: ") and said in line


# The layout the previous version made (schema 1): NULL patterns across columns.
SCHEMA_1 = (
    "CREATE TABLE idempotency_records (key TEXT PRIMARY KEY, fingerprint BYTEA NOT NULL, owner TEXT, "
    "lease_until REAL, outcome TEXT, expires_at REAL)"
)


def test_a_store_made_by_the_previous_version_stops_the_server_with_one_line(store_url):
    """Issue 16, findings 7 and 12: the schema version is recorded and checked; an old store was
    silently used with the new code's statements (or, on PostgreSQL, never upgraded)."""
    execute(store_url, SCHEMA_1)
    refused = subprocess.run(
        [sdk2_python(), *SDK2_SERVER, "--placement", "params", "--store", store_url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert refused.returncode == 1 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"cannot open the store {store_url}: ") and "schema version 1" in line


LIMITS = ["retention", "lease", "max_records", "max_records_per_principal", "max_key_length", "deadline"]


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "30"])
def test_a_limit_that_voids_a_guarantee_is_refused_at_construction_in_one_line(limit, value):
    with pytest.raises(ValueError) as refused:
        Limits(**{limit: value})
    assert str(refused.value) == f"Limits({limit}={value!r}): {limit} must be a finite number above zero"


def test_limits_above_zero_are_taken_as_given():
    limits = Limits(retention=0.5, lease=1, max_records=1, max_records_per_principal=1, max_key_length=1)
    assert (limits.retention, limits.lease, limits.max_records) == (0.5, 1, 1)


async def test_work_spawned_from_a_unit_of_work_gets_its_own_once_that_one_has_ended(opened):
    """A tool starts background work that writes after the call's unit of work ended: its write is kept,
    in a unit of work of its own, and nothing is left waiting (it joined the ended one, and was lost or hung)."""
    store, call_ended, written = opened.store, anyio.Event(), anyio.Event()

    async def background_work() -> None:
        await call_ended.wait()
        async with store.transaction() as tx:
            await the_ledger.charge(tx, 5)
        written.set()

    with anyio.fail_after(10):  # a regression waits forever on SQLite's writer: fail instead
        async with anyio.create_task_group() as tasks:
            async with store.transaction() as tx:  # the layer's unit of work around a keyed call
                await the_ledger.charge(tx, 100)
                tasks.start_soon(background_work)  # inherits the context, and with it this unit of work
            call_ended.set()
            await written.wait()
        async with store.transaction() as tx:
            assert await the_ledger.read(tx) == {"balance": 105, "charges": 2}


async def test_a_claim_on_a_malformed_sqlite_file_is_the_store_failing_not_a_driver_error(tmp_path):
    """P23: every SQLite error a claim meets, not only "database is locked", is StoreUnavailable, which the
    layer answers as retryable; a malformed file (a DatabaseError) escaped the claim as the driver's own."""
    path = tmp_path / "store.db"
    await sqlite.SQLiteStore(str(path), Limits()).close()
    with path.open("r+b") as file:  # every page but the first (the schema) overwritten
        file.seek(4096)
        file.write(b"\xff" * (path.stat().st_size - 4096))
    store = sqlite.SQLiteStore(str(path), Limits())
    try:
        with pytest.raises(StoreUnavailable, match="malformed"):
            await store.claim("k", FINGERPRINT, ALICE)
    finally:
        await store.close()
