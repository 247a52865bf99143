"""P6', P9', P18 at their edges on the stores kept in process (memory, SQLite), with a fake clock: the cases
the mutation run (tests/mutation/) found no test of.
"""

from contextlib import asynccontextmanager

import pytest
from conftest import FakeClock

from mcp_idempotency.stores import Full, Held, Limits, Won, memory, sqlite

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

WINDOW = 1.0  # seconds: the retention and the lease
FINGERPRINT = b"the request"
ALICE = '["alice"]'


@asynccontextmanager
async def a_store(kind: str, tmp_path, share: int):
    """A memory or SQLite store with a one-second window, room for far more records than `share`, and its clock."""
    clock = FakeClock()
    limits = Limits(retention=WINDOW, lease=WINDOW, max_records=10 * share, max_records_per_principal=share)
    if kind == "memory":
        store = memory.MemoryStore(limits, clock)
    else:
        store = sqlite.SQLiteStore(str(tmp_path / "store.db"), limits, clock)
    try:
        yield store, clock
    finally:
        await store.close()


async def completed(store, key: str, fingerprint: bytes = FINGERPRINT) -> bool:
    """Claim `key` and complete it, as a keyed call does; whether the completion was recorded."""
    assert isinstance(await store.claim(key, fingerprint, ALICE), Won)
    async with store.transaction() as tx:
        tx.complete(key, fingerprint, f"done {key}")
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
