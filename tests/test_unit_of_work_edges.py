"""P6', P8, P9, P9', P18 at their edges on the stores kept in process (memory, SQLite), with a fake clock: the
cases the mutation run (tests/mutation/) found no test of. A fake clock moves by exact sums, so a deadline
can be met at its very instant.
"""

import dataclasses
import sqlite3
from contextlib import asynccontextmanager

import pytest
from conftest import FakeClock

from mcp_idempotency.stores import (
    Full,
    Held,
    Limits,
    OtherSchema,
    Won,
    checked_url,
    memory,
    must_create,
    must_upgrade,
    open_store,
    sqlite,
)

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

WINDOW = 1.0  # seconds: the retention and the lease
FINGERPRINT = b"the request"
ALICE = '["alice"]'


@asynccontextmanager
async def a_store(kind: str, tmp_path, *, share: int = 1_000, bound: int = 10_000):
    """A memory or SQLite store with a one-second window, this share and bound, and its clock."""
    clock = FakeClock()
    limits = Limits(retention=WINDOW, lease=WINDOW, max_records=bound, max_records_per_principal=share)
    if kind == "memory":
        store = memory.MemoryStore(limits, clock)
    else:
        store = sqlite.SQLiteStore(str(tmp_path / "store.db"), limits, clock)
    try:
        yield store, clock
    finally:
        await store.close()


async def completed(store, key: str) -> bool:
    """Claim `key` and complete it, as a keyed call does; whether the completion was recorded."""
    assert isinstance(await store.claim(key, FINGERPRINT, ALICE), Won)
    async with store.transaction() as tx:
        tx.complete(key, FINGERPRINT, f"done {key}")
    return tx.completed


STORES = ["memory", "sqlite"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_principal_holding_more_expired_records_than_its_share_is_still_refused_once_its_live_ones_fill_it(
    kind, tmp_path
):
    """P9': expired records stay stored until a purge, so a principal may hold more than its share of them;
    only the live ones count, and they still fill it."""
    async with a_store(kind, tmp_path, share=2) as (store, clock):
        assert await completed(store, "old 0") and await completed(store, "old 1")
        clock.advance(WINDOW * 1.5)  # both expired, neither purged: the store is far from full
        assert await completed(store, "new 0") and await completed(store, "new 1")
        assert await store.claim("new 2", FINGERPRINT, ALICE) == Full()


@pytest.mark.parametrize("kind", STORES)
async def test_a_share_of_hundreds_of_keys_is_refused_exactly_at_its_size(kind, tmp_path):
    """P9': the default share is 1,000; counted as a number, whatever its size (past 256, `is` is not `==`)."""
    share = 300
    async with a_store(kind, tmp_path, share=share) as (store, _):
        for n in range(share):
            assert isinstance(await store.claim(f"k{n}", FINGERPRINT, ALICE), Won)
        assert await store.claim("one more", FINGERPRINT, ALICE) == Full()


@pytest.mark.parametrize("kind", STORES)
async def test_a_claim_is_given_back_by_its_token_as_text_not_by_the_very_object_returned(kind, tmp_path):
    """P6': the token is compared by value, as the SQL stores compare it."""
    async with a_store(kind, tmp_path, share=2) as (store, _):
        won = await store.claim("k", FINGERPRINT, ALICE)
        assert isinstance(won, Won)
        await store.release("k", won.owner.encode().decode())  # equal text, another object
        assert isinstance(await store.claim("k", FINGERPRINT, ALICE), Won)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(("running", "completing"), [(b"a request", b"z request"), (b"z request", b"a request")])
async def test_a_completion_for_another_request_is_fenced_off_whichever_fingerprint_sorts_first(
    kind, tmp_path, running, completing
):
    """P18: a completion must match the running request's fingerprint exactly, not by order."""
    async with a_store(kind, tmp_path, share=2) as (store, _):
        assert isinstance(await store.claim("k", running, ALICE), Won)
        async with store.transaction() as tx:
            tx.complete("k", completing, "done")
        assert not tx.completed
        assert await store.claim("k", running, ALICE) == Held(running, None)  # still running, never completed


@pytest.mark.parametrize("kind", STORES)
async def test_a_completion_carrying_an_equal_fingerprint_made_anew_is_recorded(kind, tmp_path):
    """P18: fingerprints are compared by value: a digest computed again for the same request completes it."""
    async with a_store(kind, tmp_path, share=2) as (store, _):
        assert isinstance(await store.claim("k", FINGERPRINT, ALICE), Won)
        async with store.transaction() as tx:
            tx.complete("k", bytes(bytearray(FINGERPRINT)), "done")  # equal bytes, another object
        assert tx.completed


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(("running", "other"), [(b"a request", b"z request"), (b"z request", b"a request")])
async def test_a_passed_lease_is_never_taken_over_by_another_request_whichever_fingerprint_sorts_first(
    kind, tmp_path, running, other
):
    """P18: only the same request takes a running key over; another one is a conflict, whatever its digest."""
    async with a_store(kind, tmp_path) as (store, clock):
        assert isinstance(await store.claim("k", running, ALICE), Won)
        clock.advance(WINDOW * 1.5)
        assert await store.claim("k", other, ALICE) == Held(running, None)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("keys", [("a", "z"), ("z", "a")], ids=["rising", "falling"])
async def test_a_share_counts_every_other_live_key_whatever_their_order(kind, tmp_path, keys):
    """P9': the walk over a principal's keys skips the claimed key alone, not the keys sorting after it."""
    held, new = keys
    async with a_store(kind, tmp_path, share=1) as (store, _):
        assert isinstance(await store.claim(held, FINGERPRINT, ALICE), Won)
        assert await store.claim(new, FINGERPRINT, ALICE) == Full()


# ----------------------------------------------------------------------------
# P8, P9, P18: a deadline is passed at its very instant, for the claim, the share and the purge alike
# ----------------------------------------------------------------------------


# What meets the record whose deadline has just come: its own key claimed again (the record reads as
# expired), a new key of its principal at the share (its place is free), a new key in a full store (purged).
AT_THE_DEADLINE = [
    pytest.param({"share": 1}, "k", id="its-key-is-new"),
    pytest.param({"share": 1}, "new", id="its-place-in-the-share-is-free"),
    pytest.param({"bound": 1}, "new", id="a-full-store-purges-it"),
]


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(("bounds", "claimed"), AT_THE_DEADLINE)
async def test_a_record_has_passed_its_deadline_at_its_very_instant(kind, bounds, claimed, tmp_path):
    async with a_store(kind, tmp_path, **bounds) as (store, clock):
        assert await completed(store, "k")
        clock.advance(WINDOW)  # exactly its deadline: 1000.0 + 1.0, no rounding
        assert isinstance(await store.claim(claimed, FINGERPRINT, ALICE), Won)


@pytest.mark.parametrize("kind", STORES)
async def test_a_full_store_purges_the_records_that_expired_first_and_keeps_the_rest(kind, tmp_path):
    """P8, P9: completion order is expiry order; the purge frees the expired front, not what came after."""
    async with a_store(kind, tmp_path, bound=2) as (store, clock):
        assert await completed(store, "first")
        clock.advance(WINDOW / 2)
        assert await completed(store, "second")
        clock.advance(WINDOW * 0.75)  # the first has expired, the second has not
        assert isinstance(await store.claim("third", FINGERPRINT, ALICE), Won)
        assert await store.claim("second", FINGERPRINT, ALICE) == Held(FINGERPRINT, "done second")


@pytest.mark.parametrize("kind", STORES)
async def test_a_purge_passes_over_a_running_record_to_the_expired_ones_behind_it_and_keeps_it_running(kind, tmp_path):
    """P9, P18: the first key to expire runs again; the purge drops the expired one behind it, never the running one."""
    async with a_store(kind, tmp_path, bound=2) as (store, clock):
        assert await completed(store, "again") and await completed(store, "expired")
        clock.advance(WINDOW * 1.5)
        assert isinstance(
            await store.claim("again", FINGERPRINT, ALICE), Won
        )  # running anew, at the expiry order's front
        assert isinstance(await store.claim("new", FINGERPRINT, ALICE), Won)  # room made by purging "expired"
        assert await store.claim("again", FINGERPRINT, ALICE) == Held(FINGERPRINT, None)  # still running


@pytest.mark.parametrize("kind", STORES)
async def test_a_full_store_lets_a_running_record_whose_lease_passed_be_taken_over(kind, tmp_path):
    """P9, P18: a takeover reuses its record, so a store full of running records still lets one be taken over."""
    async with a_store(kind, tmp_path, bound=2) as (store, clock):
        for key in ("a", "b"):
            assert isinstance(await store.claim(key, FINGERPRINT, ALICE), Won)
        clock.advance(WINDOW * 1.5)
        assert isinstance(await store.claim("a", FINGERPRINT, ALICE), Won)


@pytest.mark.parametrize("kind", STORES)
async def test_a_bound_of_hundreds_of_records_is_kept_exactly(kind, tmp_path):
    """P9: counted as a number whatever its size (past 256, `is` is not `==`)."""
    async with a_store(kind, tmp_path, bound=300) as (store, _):
        for n in range(300):
            assert isinstance(await store.claim(f"k{n}", FINGERPRINT, ALICE), Won)
        assert await store.claim("one more", FINGERPRINT, ALICE) == Full()


# ----------------------------------------------------------------------------
# A unit of work's own statements
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
async def test_a_query_changes_no_rows_and_fetchone_answers_its_first_row(kind, tmp_path):
    async with a_store(kind, tmp_path) as (store, _), store.transaction() as tx:
        assert await tx.execute("SELECT 1") == 0
        assert await tx.fetchone("SELECT 1 UNION ALL SELECT 2") == (1,)


@pytest.mark.parametrize("kind", STORES)
async def test_a_constraint_a_tools_statement_breaks_is_the_tools_error_and_its_unit_of_work_goes_on(kind, tmp_path):
    """P23: the tool's own error is its outcome, not the store failing."""
    async with a_store(kind, tmp_path) as (store, _), store.transaction() as tx:
        await tx.execute("CREATE TABLE once (id INTEGER PRIMARY KEY)")
        await tx.execute("INSERT INTO once VALUES (1)")
        with pytest.raises(sqlite3.IntegrityError):
            await tx.execute("INSERT INTO once VALUES (1)")
        assert tx.failure is None and await tx.fetchone("SELECT count(*) FROM once") == (1,)


# ----------------------------------------------------------------------------
# The limits, the schema versions and the URLs every store keeps to
# ----------------------------------------------------------------------------


def test_the_limits_are_fixed_once_made_and_default_to_a_thirty_second_lease():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().lease = 1  # type: ignore[misc]
    assert Limits().lease == 30


@pytest.mark.parametrize(("lease", "wait"), [(4, 4 / 3), (60, 10)])
def test_a_statement_waits_a_third_of_the_lease_and_ten_seconds_at_most(lease, wait):
    assert Limits(lease=lease).wait == wait


URL = "sqlite:/s.db"


@pytest.mark.parametrize(("found", "create"), [(0, True), (4, False)])
def test_a_store_is_created_where_there_is_none_and_used_at_this_version(found, create):
    assert must_create(URL, found, "otherwise") is create


@pytest.mark.parametrize(("found", "upgrade"), [(2, True), (3, True), (4, False)])
def test_the_upgrade_moves_versions_two_and_three_and_leaves_this_version(found, upgrade):
    assert must_upgrade(URL, found, "otherwise") is upgrade


IN_PLACE = f"upgrade it in place with: mcp-idempotency-store upgrade {URL}"
REFUSED = [
    (must_create, 2, f"holds schema version 2, and this code reads version 4; {IN_PLACE}"),
    (must_create, 3, f"holds schema version 3, and this code reads version 4; {IN_PLACE}"),
    (must_create, 1, "holds schema version 1, and this code reads version 4; otherwise"),
    (must_create, 5, "holds schema version 5, and this code reads version 4; otherwise"),
    (must_upgrade, 0, "holds no store, so there is nothing to upgrade: a server creates one there as it starts"),
    (must_upgrade, 1, "holds schema version 1, and this code reads version 4; otherwise"),
    (must_upgrade, 5, "holds schema version 5, and this code reads version 4; otherwise"),
]


@pytest.mark.parametrize(("check", "found", "said"), REFUSED)
def test_any_other_version_is_refused_in_one_line_that_says_what_to_do(check, found, said):
    with pytest.raises(OtherSchema) as refused:
        check(URL, found, "otherwise")
    assert str(refused.value) == f"it {said}"


def test_the_upgrade_of_a_file_that_is_not_there_makes_none(tmp_path):
    with pytest.raises(FileNotFoundError):
        sqlite.upgrade(str(tmp_path / "none.db"))
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("url", ["bogus", "sqlite:", "sqlite"])
def test_a_url_naming_no_store_is_refused(url):
    with pytest.raises(ValueError, match="unknown store"):
        checked_url(url)


async def test_a_memory_url_read_at_run_time_opens_the_memory_store():
    """A URL comes from the command line, a string made at run time: it is compared by value."""
    url = "".join(["mem", "ory"])
    assert checked_url(url) == url
    async with open_store(url, Limits()) as store:
        assert isinstance(store, memory.MemoryStore)


async def test_a_sqlite_store_reopened_with_a_lower_bound_than_it_holds_refuses_new_keys(tmp_path):
    """P9: the count kept in the file may pass a bound lowered since: the store is then full, not unbounded."""
    async with a_store("sqlite", tmp_path, bound=3) as (store, _):
        for key in ("a", "b", "c"):
            assert isinstance(await store.claim(key, FINGERPRINT, ALICE), Won)
    async with a_store("sqlite", tmp_path, bound=2) as (store, _):
        assert await store.claim("d", FINGERPRINT, ALICE) == Full()
