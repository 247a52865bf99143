"""P9', schema version 4: the SQL stores' count of each principal's records, kept by triggers.

On SQLite and PostgreSQL, the count of each principal's rows (idempotency_shares) and the
store's count equal the rows themselves after every way a record comes or goes: claims,
a refusal of the principal's share and of the store, a release, a principal's expired
records purged as it nears its share, the store's purge, `forget`, and an operator's
DELETE by hand. A principal whose share is full of expired completed records gets its
next key; one whose share is full of live records is refused, as before.

A version 3 file or database (tests/fixtures/, the text version 3 ran) holding records of
two principals is refused at start in one line naming the upgrade command; upgraded, it
holds the right counts, serves claims within the share and refuses past it, and on
PostgreSQL its claim function is version 4's.
"""

import contextlib
import json
import sqlite3
import time
from pathlib import Path

import anyio
import pytest
from stores import execute
from test_share import ALICE, BOB, BOUND, FINGERPRINT, SHARE, WINDOW, a_store, completed, let_pass
from test_upgrade import run, upgrade_command

from mcp_idempotency.rules import principal_name
from mcp_idempotency.stores import Full, Held, Limits, OtherSchema, Won, postgres, sqlite

pytestmark = pytest.mark.targets("2x-http")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STORES = ["sqlite", "postgresql"]
SHARES = "SELECT principal, records FROM idempotency_shares"
ROWS = "SELECT principal, count(*) FROM idempotency_records GROUP BY principal"
COUNT = "SELECT n FROM idempotency_record_count"


def others(n: int) -> str:
    """The principal of the n-th other caller."""
    return principal_name((f"caller {n}",))


async def counts(url: str) -> tuple[dict, dict, int]:
    """The counts per principal as the store keeps them, the rows per principal, and the store's own count."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"))) as db:
            kept, rows = dict(db.execute(SHARES).fetchall()), dict(db.execute(ROWS).fetchall())
            return kept, rows, db.execute(COUNT).fetchone()[0]
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        kept, rows = dict(await db.fetch(SHARES)), dict(await db.fetch(ROWS))
        return kept, rows, await db.fetchval(COUNT)
    finally:
        await db.close()


async def kept_in_step(url: str) -> dict:
    """Assert that both counts equal the rows; the rows per principal."""
    kept, rows, counted = await counts(url)
    assert kept == rows and counted == sum(rows.values())
    return rows


def url_of(kind: str, request, tmp_path) -> str:
    """The URL of the store a_store opened."""
    return request.getfixturevalue("postgres_url") if kind == "postgresql" else f"sqlite:{tmp_path / 'store.db'}"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", STORES)
async def test_each_principals_count_equals_its_rows_through_claims_refusals_purges_forget_and_a_delete_by_hand(
    kind, request, tmp_path
):
    async with a_store(kind, request, tmp_path) as (store, clock):
        url = url_of(kind, request, tmp_path)
        for n in range(SHARE):
            assert isinstance(await completed(store, f"alice {n}", ALICE), Won)
        await completed(store, "bob 0", BOB)
        running = await store.claim("bob 1", FINGERPRINT, BOB)
        assert await kept_in_step(url) == {ALICE: SHARE, BOB: 2}

        assert await store.claim("alice new", FINGERPRINT, ALICE) == Full()  # her share, full of live records
        await store.release("bob 1", running.owner)
        assert await kept_in_step(url) == {ALICE: SHARE, BOB: 1}

        await let_pass(clock, WINDOW * 1.5)  # every record expires
        # Her share is full of expired completed records: they are purged as she claims, and she gets her key.
        assert isinstance(await store.claim("alice new", FINGERPRINT, ALICE), Won)
        assert await kept_in_step(url) == {ALICE: 1, BOB: 1}

        for n in range(BOUND - 2):  # the store full, of expired records but hers, running
            await completed(store, f"other {n}", others(n))
        await let_pass(clock, WINDOW * 1.5)
        assert isinstance(await store.claim("dave 0", FINGERPRINT, "dave"), Won)  # the store's purge made room
        assert await kept_in_step(url) == {ALICE: 1, "dave": 1}

        for n in range(BOUND - 2):  # the store full of live records
            await completed(store, f"other {n}", others(n))
        assert await store.claim("erin 0", FINGERPRINT, "erin") == Full()
        assert len(await kept_in_step(url)) == BOUND  # alice, dave and the others; no row for erin

        assert await store.forget(ALICE) == 1
        assert ALICE not in await kept_in_step(url)
        by_hand = (
            "DELETE FROM idempotency_records WHERE principal <> 'dave'"  # an operator's, as stores.execute runs it
        )
        assert await anyio.to_thread.run_sync(execute, url, by_hand) == BOUND - 2
        assert await kept_in_step(url) == {"dave": 1}
        assert isinstance(await store.claim("erin 0", FINGERPRINT, "erin"), Won)  # the store counts its places back
        assert await kept_in_step(url) == {"dave": 1, "erin": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", STORES)
async def test_a_principal_at_its_share_with_some_records_expired_gets_exactly_as_many_new_keys(
    kind, request, tmp_path
):
    """The walk decides once the count exceeds the share: live records count, expired completed ones go."""
    async with a_store(kind, request, tmp_path) as (store, clock):
        await completed(store, "alice 0", ALICE)
        await let_pass(clock, WINDOW * 1.5)  # alice 0 expired
        for n in range(1, SHARE):
            await completed(store, f"alice {n}", ALICE)
        assert isinstance(await store.claim("alice new 0", FINGERPRINT, ALICE), Won)  # alice 0's place
        assert await store.claim("alice new 1", FINGERPRINT, ALICE) == Full()
        assert await store.claim("alice 1", FINGERPRINT, ALICE) == Held(FINGERPRINT, "done alice 1")
        assert await kept_in_step(url_of(kind, request, tmp_path)) == {ALICE: SHARE}


# ----------------------------------------------------------------------------
# Version 3, upgraded
# ----------------------------------------------------------------------------


def made_by_version_3(url: str) -> None:
    """A store as version 3 made it: SHARE completed records of Alice's and one of Bob's, all within their window."""
    stored = [(f"alice {n}", ALICE) for n in range(SHARE)] + [("bob 0", BOB)]
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.executescript(f"BEGIN IMMEDIATE; {(FIXTURES / 'sqlite_v3.sql').read_text()} COMMIT;")
            db.execute("BEGIN IMMEDIATE")
            for key, principal in stored:
                db.execute(
                    "INSERT INTO idempotency_records (key, principal, fingerprint, status, deadline, outcome) "
                    "VALUES (?, ?, ?, 'completed', ?, ?)",
                    (key, principal, FINGERPRINT, time.time() + 3600, json.dumps(f"done {key}")),
                )
            db.execute("UPDATE idempotency_record_count SET n = ?", (len(stored),))
            db.execute("COMMIT")
        return

    import asyncpg

    async def make() -> None:
        db = await asyncpg.connect(url)
        try:
            async with db.transaction():
                await db.execute((FIXTURES / "postgres_v3.sql").read_text())
                for key, principal in stored:
                    await db.execute(
                        "INSERT INTO idempotency_records (key, principal, fingerprint, status, deadline, outcome) "
                        "VALUES ($1, $2, $3, 'completed', clock_timestamp() + interval '1 hour', $4)",
                        key,
                        principal,
                        FINGERPRINT,
                        json.dumps(f"done {key}"),
                    )
                await db.execute("UPDATE idempotency_record_count SET n = $1", len(stored))
        finally:
            await db.close()

    anyio.run(make)


async def opened(url: str, limits: Limits):
    """The store `url` names, opened as a server opens it."""
    if url.startswith("sqlite:"):
        return sqlite.SQLiteStore(url.removeprefix("sqlite:"), limits)
    return await postgres.PostgresStore.open(url, limits)


def test_a_version_3_store_is_refused_until_upgraded_then_holds_each_principals_count_and_serves_claims(store_url):
    made_by_version_3(store_url)
    limits = Limits(retention=3600, lease=30, max_records=BOUND, max_records_per_principal=SHARE)
    with pytest.raises(OtherSchema) as refused:
        anyio.run(opened, store_url, limits)
    assert str(refused.value) == (
        "it holds schema version 3, and this code reads version 4; "
        f"upgrade it in place with: mcp-idempotency-store upgrade {store_url}"
    )

    upgraded = run(upgrade_command(), "upgrade", store_url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.startswith(f"upgraded {store_url} in place from schema version 3 to 4")
    assert anyio.run(kept_in_step, store_url) == {ALICE: SHARE, BOB: 1}

    async def served() -> None:
        store = await opened(store_url, limits)
        try:
            assert await store.claim("alice 0", FINGERPRINT, ALICE) == Held(FINGERPRINT, json.dumps("done alice 0"))
            assert await store.claim("alice new", FINGERPRINT, ALICE) == Full()  # her share, counted by the upgrade
            assert isinstance(await store.claim("bob 1", FINGERPRINT, BOB), Won)
            assert await store.forget(BOB) == 2
        finally:
            await store.close()
        assert await kept_in_step(store_url) == {ALICE: SHARE}

    anyio.run(served)
    if not store_url.startswith("sqlite:"):
        claim = execute_fetch(store_url, "SELECT prosrc FROM pg_proc WHERE proname = 'idempotency_claim'")
        assert "idempotency_shares" in claim  # the claim function reads the counts: version 4's


def execute_fetch(url: str, query: str) -> str:
    """One value read from the PostgreSQL database `url` names."""
    import asyncpg

    async def fetch() -> str:
        db = await asyncpg.connect(url)
        try:
            return str(await db.fetchval(query))
        finally:
            await db.close()

    return anyio.run(fetch)
