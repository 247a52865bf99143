"""P8, P9, P16, P17, P18 in sdk2/store.py itself: each store in this process, spoken to as the
2.x server's dispatch layer speaks to it.

The memory and SQLite stores read a clock they are given, so a fake one moves their
windows without sleeping. PostgreSQL keeps time on the database's clock (P19): there
the windows are a second long and the test waits them out.
"""

import importlib.util
import subprocess

import anyio
import pytest

from conftest import FakeClock
from wire import ROOT, sdk2_python

# Loaded under a name of its own: on sys.path, sdk2/ would shadow the 1.x server.py.
spec = importlib.util.spec_from_file_location("sdk2_store", ROOT / "sdk2" / "store.py")
store_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(store_module)
Full, Held, Limits, Won = store_module.Full, store_module.Held, store_module.Limits, store_module.Won

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

WINDOW = 1.0  # seconds: the retention and the lease in these tests
FINGERPRINT, OTHER = b"the request", b"another request"


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


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def opened(request, tmp_path):
    """Each store with a one-second retention and lease, and room for two records."""
    limits = Limits(retention=WINDOW, lease=WINDOW, max_records=2)
    if request.param == "postgresql":
        store = await store_module.PostgresStore.open(request.getfixturevalue("postgres_url"), limits)
        yield Opened(store, None)
    else:
        clock = FakeClock()
        store = (store_module.MemoryStore(limits, clock) if request.param == "memory"
                 else store_module.SQLiteStore(str(tmp_path / "store.db"), limits, clock))
        yield Opened(store, clock)
    await store.close()


async def charged(store, key: str, owner: str, amount: int = 100) -> bool:
    """A keyed charge's unit of work as the server runs it: the charge, then commit with the record."""
    async with store.transaction() as tx:
        await tx.charge(amount)
        return await tx.commit_with_record(key, owner, f"charged {amount}")


async def ledger(store) -> dict:
    async with store.transaction() as tx:
        return await tx.ledger()


async def test_completed_record_replays_inside_its_window_and_is_dropped_after_it(opened):
    store = opened.store
    claim = await store.claim("k", FINGERPRINT)
    assert isinstance(claim, Won) and await charged(store, "k", claim.owner)

    assert await store.claim("k", FINGERPRINT) == Held(FINGERPRINT, "charged 100")  # a replay
    await opened.wait_out(WINDOW * 1.2)
    assert isinstance(await store.claim("k", FINGERPRINT), Won)  # P8: past its window the key is new


async def test_full_store_refuses_a_new_key_and_takes_one_again_once_a_record_expires(opened):
    store = opened.store
    for key in ("a", "b"):
        claim = await store.claim(key, FINGERPRINT)
        assert await charged(store, key, claim.owner)

    assert await store.claim("c", FINGERPRINT) == Full()
    assert (await store.claim("a", FINGERPRINT)).outcome == "charged 100"  # a stored key still answers
    await opened.wait_out(WINDOW * 1.2)
    assert isinstance(await store.claim("c", FINGERPRINT), Won)  # room came back as records expired
    assert await ledger(store) == {"balance": 200, "charges": 2}


async def test_a_key_claimed_by_many_tasks_at_once_is_won_once(opened):
    claims = []

    async def claim():
        claims.append(await opened.store.claim("k", FINGERPRINT))

    async with anyio.create_task_group() as tasks:
        for _ in range(20):
            tasks.start_soon(claim)

    assert sum(isinstance(claim, Won) for claim in claims) == 1
    assert all(claim == Held(FINGERPRINT, None) for claim in claims if not isinstance(claim, Won))


async def test_a_passed_lease_is_taken_over_by_the_same_request_only(opened):
    store = opened.store
    first = await store.claim("k", FINGERPRINT)

    assert await store.claim("k", FINGERPRINT) == Held(FINGERPRINT, None)  # in progress
    await opened.wait_out(WINDOW * 1.2)
    assert await store.claim("k", OTHER) == Held(FINGERPRINT, None)  # still a conflict, never a takeover
    second = await store.claim("k", FINGERPRINT)
    assert isinstance(second, Won) and second.owner != first.owner


async def test_a_takeover_reuses_its_record_so_the_bound_counts_keys_not_claims(opened):
    """P9, P18: a key taken over once its lease passed is still one record of the two allowed."""
    store = opened.store
    await store.claim("a", FINGERPRINT)
    await opened.wait_out(WINDOW * 1.2)
    assert isinstance(await store.claim("a", FINGERPRINT), Won)  # the takeover

    assert isinstance(await store.claim("b", FINGERPRINT), Won)
    assert await store.claim("c", FINGERPRINT) == Full()


async def test_a_fenced_completion_rolls_back_the_charge_it_joined(opened):
    """P17, P18: the original outlived its lease and a retry took over: the original's charge is
    rolled back with its refused completion, and the retry's charge is the only one."""
    store = opened.store
    original = await store.claim("k", FINGERPRINT)
    await opened.wait_out(WINDOW * 1.2)
    retry = await store.claim("k", FINGERPRINT)

    assert not await charged(store, "k", original.owner)
    assert await ledger(store) == {"balance": 0, "charges": 0}
    assert await charged(store, "k", retry.owner)
    assert await ledger(store) == {"balance": 100, "charges": 1}
    assert await store.claim("k", FINGERPRINT) == Held(FINGERPRINT, "charged 100")


async def test_a_released_claim_lets_the_same_key_run_again_and_only_its_owner_may_release_it(opened):
    """P6': -32042 asks the client to send the request again: its claim is given back, not recorded."""
    store = opened.store
    first = await store.claim("k", FINGERPRINT)
    await store.release("k", "someone else")  # not the owner: nothing changes
    assert await store.claim("k", FINGERPRINT) == Held(FINGERPRINT, None)

    await store.release("k", first.owner)
    second = await store.claim("k", FINGERPRINT)
    assert isinstance(second, Won) and second.owner != first.owner
    await store.release("k", first.owner)  # a stale owner cannot release the new claim
    assert await charged(store, "k", second.owner)
    await store.release("k", second.owner)  # nor can anyone release a completed record
    assert await store.claim("k", FINGERPRINT) == Held(FINGERPRINT, "charged 100")

    await store.claim("b", FINGERPRINT)  # P9: a released key left no record behind to count
    assert await store.claim("c", FINGERPRINT) == Full()


BAD_STORES = [
    pytest.param("redis://127.0.0.1/0", "unknown store", id="unknown-scheme"),
    pytest.param("sqlite:/no/such/folder/store.db", "No such file or directory", id="sqlite-folder-missing"),
    pytest.param("postgresql://postgres@127.0.0.1:1/none", "Error", id="postgresql-refused"),
]


@pytest.mark.parametrize(("url", "said"), BAD_STORES)
def test_a_store_that_cannot_be_opened_stops_the_server_with_one_line(url, said):
    refused = subprocess.run([sdk2_python(), str(ROOT / "sdk2" / "server.py"), "--store", url],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)

    assert refused.returncode == 1 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"cannot open the store {url}: ") and said in line
