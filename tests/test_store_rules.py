"""Each store rule as a table of steps, played on every store: memory, a SQLite file, PostgreSQL.

A row is one rule, a few claims deep: each step is what the dispatch layer asks a store
(a claim, a completion with the tool's own write, a renewal, forgetting a principal) or time passing,
with the answer every store must give. The stores hold the same rules in three forms
(Python, SQLite's SQL, PostgreSQL's claim function), so a row that one store answers
otherwise is a bug in that store.

The memory and SQLite stores read a fake clock (time passes at once); PostgreSQL keeps
time on the database's clock (P19), so there a window is a second and a row waits it out.
"""

from dataclasses import dataclass

import anyio
import pytest
from conftest import FakeClock

from mcp_idempotency.stores import Full, Held, Limits, Store, Won
from mcp_idempotency.stores.memory import MemoryStore
from mcp_idempotency.stores.postgres import PostgresStore
from mcp_idempotency.stores.sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.targets("2x-stdio", "2x-http")]

WINDOW = 1.0  # seconds: a row's short window (a lease or a retention); PostgreSQL waits it out
PASSES = WINDOW * 1.2  # time enough for a short window to pass
LONG = WINDOW * 10  # a window no row waits out
FINGERPRINT, OTHER = b"the request", b"another request"
ALICE, BOB = '["alice"]', '["bob"]'  # principals as the layer names them (rules.principal_name)
OUTCOME = "done"

# What a claim answers. A completed record's conflict is Held with the stored fingerprint
# and outcome: the layer, not the store, tells a conflict from a replay.
IN_PROGRESS = Held(FINGERPRINT, None)
REPLAY = Held(FINGERPRINT, OUTCOME)
FULL = Full()

# The tool's own table: a completion's unit of work writes a row to it, kept only if it completes the record.
WORK = "CREATE TABLE IF NOT EXISTS work_done (key TEXT NOT NULL)"


@dataclass(frozen=True)
class Claim:
    """store.claim(key, fingerprint, principal) answers `answer` (Won: any fencing token)."""

    key: str
    answer: type[Won] | Held | Full
    fingerprint: bytes = FINGERPRINT
    principal: str = ALICE


@dataclass(frozen=True)
class Complete:
    """A call's unit of work writes its work and completes `key`: `completed` says whether the commit recorded it."""

    key: str
    completed: bool


@dataclass(frozen=True)
class Renew:
    """The holder of the `claim`th won claim of `key` renews its lease: `renewed` says whether it still held it."""

    key: str
    claim: int
    renewed: bool


@dataclass(frozen=True)
class Forget:
    """store.forget(principal) deletes `count` records."""

    principal: str
    count: int


@dataclass(frozen=True)
class Wait:
    """`seconds` pass on the store's clock."""

    seconds: float


Step = Claim | Complete | Renew | Forget | Wait


@dataclass(frozen=True)
class Rule:
    """One rule: the limits it runs under, and its steps with the answers every store must give."""

    limits: Limits
    steps: list[Step]


RULES = {
    "claim, replay, conflict: a completed key replays to its request and is held against another; "
    "its window passed, the key is new": Rule(
        Limits(retention=WINDOW, lease=LONG, max_records=10),
        [
            Claim("k", Won),
            Claim("k", IN_PROGRESS),
            Complete("k", True),
            Claim("k", REPLAY),
            Claim("k", REPLAY, fingerprint=OTHER),  # a conflict: the stored fingerprint differs
            Complete("k", False),  # a second completion of a completed key is fenced off
            Claim("k", REPLAY),
            Wait(PASSES),
            Claim("k", Won, fingerprint=OTHER),
            Claim("k", Held(OTHER, None)),
        ],
    ),
    "takeover moves the deadline: a retry right after a takeover is in progress; the lease passed "
    "again, it is taken again; the first completion wins": Rule(
        Limits(retention=LONG, lease=WINDOW, max_records=10),
        [
            Claim("k", Won),
            Claim("k", IN_PROGRESS),
            Wait(PASSES),
            Claim("k", IN_PROGRESS, fingerprint=OTHER),  # another request never takes a running key over
            Claim("k", Won),  # the takeover
            Claim("k", IN_PROGRESS),  # its lease starts now, not at the first claim
            Wait(PASSES),
            Claim("k", Won),  # the second takeover
            Claim("k", IN_PROGRESS),
            Complete("k", True),  # whichever of the three calls completes first
            Complete("k", False),
            Complete("k", False),
            Claim("k", REPLAY),
        ],
    ),
    "a holder that renews keeps its key past the first lease; stopped, it is taken over by the same request, "
    "and then neither its renewal nor, once completed, the new holder's moves anything": Rule(
        Limits(retention=LONG, lease=WINDOW, max_records=10),
        [
            Claim("k", Won),
            Wait(WINDOW * 0.6),
            Renew("k", 1, True),
            Wait(WINDOW * 0.6),  # past the first lease, within the renewed one
            Claim("k", IN_PROGRESS),
            Wait(PASSES),  # no renewal for a whole lease: the holder stopped
            Claim("k", Won),  # the takeover
            Renew("k", 1, False),  # the first holder's claim is no longer its own
            Renew("k", 2, True),
            Complete("k", True),
            Renew("k", 2, False),  # completed: nothing runs to renew
            Claim("k", REPLAY),
        ],
    ),
    "a full store purges its expired completed records, never a running one: "
    "the running key stays in progress and its call completes it": Rule(
        Limits(retention=WINDOW, lease=LONG, max_records=3),
        [
            Claim("a", Won),
            Complete("a", True),
            Claim("b", Won),
            Complete("b", True),
            Claim("r", Won),
            Complete("r", True),
            Wait(PASSES),  # all three expire
            Claim("r", Won),  # r runs again: an expired key is new
            Claim("d", Won),  # the store is full: a and b are purged, r is not
            Claim("e", Won),
            Claim("f", FULL),  # r, d and e run: nothing left to purge
            Claim("r", IN_PROGRESS),
            Complete("r", True),
            Claim("r", REPLAY),
        ],
    ),
    "a key completed again after it expired holds up no purge of the records that expired before it": Rule(
        Limits(retention=WINDOW, lease=LONG, max_records=3),
        [
            Claim("k", Won),
            Complete("k", True),
            Claim("a", Won),
            Complete("a", True),
            Claim("b", Won),
            Complete("b", True),
            Wait(PASSES),
            Claim("k", Won),
            Complete("k", True),  # k's new window is ahead; a's and b's have passed
            Claim("d", Won),  # the store is full: a and b are purged
            Claim("e", Won),
            Claim("f", FULL),
            Claim("k", REPLAY),
        ],
    ),
    "a full store meets calls that hang: a new key is full while they run, and still full once "
    "their lease passed; each is taken over by its own request only": Rule(
        Limits(retention=LONG, lease=WINDOW, max_records=2),
        [
            Claim("a", Won),
            Claim("b", Won),
            Claim("c", FULL),
            Claim("a", IN_PROGRESS),
            Wait(PASSES),
            Claim("c", FULL),  # a running record is never purged, its lease passed or not
            Claim("a", IN_PROGRESS, fingerprint=OTHER),
            Claim("a", Won),  # the takeover
            Claim("c", FULL),
            Complete("a", True),
            Claim("a", REPLAY),
            Claim("c", FULL),  # a completed record within its window is not purged either
        ],
    ),
    "forget while running: the call's completion is fenced off and its work rolled back; "
    "the key runs anew, and the bound counts what is left": Rule(
        Limits(retention=LONG, lease=LONG, max_records=3),
        [
            Claim("done", Won),
            Complete("done", True),
            Claim("k", Won),
            Claim("j", Won, principal=BOB),
            Forget(ALICE, 2),  # running or completed
            Complete("k", False),  # its record is gone: nothing brings it back
            Claim("k", Won),  # a new call: no record came back
            Claim("x", Won),
            Claim("y", FULL),  # j, k and x
            Claim("k", IN_PROGRESS),
            Complete("k", True),
            Complete("j", True),
            Forget(BOB, 1),
            Claim("j", Won, principal=BOB),
        ],
    ),
    "a principal's share: at it, a new key of theirs is full, another principal's is won; "
    "once one of their records passes its deadline, they have room again": Rule(
        Limits(retention=LONG, lease=WINDOW, max_records=10, max_records_per_principal=2),
        [
            Claim("a", Won),
            Complete("a", True),  # a: within its window throughout
            Claim("b", Won),  # b: runs, its lease to pass
            Claim("c", FULL),
            Claim("x", Won, principal=BOB),
            Claim("a", REPLAY),  # at the share, a stored key still answers
            Wait(PASSES),
            Claim("c", Won),  # b's deadline passed: its place is free
            Claim("d", FULL),  # a and c
            Claim("b", FULL),  # a takeover takes a place in the share too
            Claim("y", Won, principal=BOB),
        ],
    ),
}

STORES = ["memory", "sqlite", "postgresql"]


class Played:
    """A store under test, and how time passes on its clock."""

    def __init__(self, store: Store, clock: FakeClock | None):
        self.store, self.clock = store, clock
        self.owners: dict[str, list[str]] = {}  # each key's won claims' fencing tokens, in order

    async def wait(self, seconds: float) -> None:
        """Let `seconds` pass: move the fake clock, or wait on the database's real one."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await anyio.sleep(seconds)

    async def work_done(self, key: str) -> int:
        """How many completions' work on `key` the store kept."""
        async with self.store.transaction() as tx:
            row = await tx.fetchone("SELECT count(*) FROM work_done WHERE key = $1", key)
        assert row is not None
        return int(row[0])

    async def complete(self, key: str) -> bool:
        """A call's unit of work, as the layer runs it: the tool's write, then the commit that completes the record."""
        async with self.store.transaction() as tx:
            await tx.execute("INSERT INTO work_done (key) VALUES ($1)", key)
            tx.complete(key, FINGERPRINT, OUTCOME)
        return tx.completed

    async def play(self, step: Step) -> None:
        """Take one step, and check the store's answer."""
        if isinstance(step, Claim):
            answer = await self.store.claim(step.key, step.fingerprint, step.principal)
            assert isinstance(answer, Won) if step.answer is Won else answer == step.answer, f"{step}: {answer}"
            if isinstance(answer, Won):
                self.owners.setdefault(step.key, []).append(answer.owner)
        elif isinstance(step, Complete):
            kept = await self.work_done(step.key)
            completed = await self.complete(step.key)
            assert completed == step.completed, f"{step}: completed={completed}"
            assert await self.work_done(step.key) == kept + completed, f"{step}: the work kept is not the completion's"
        elif isinstance(step, Renew):
            renewed = await self.store.renew(step.key, self.owners[step.key][step.claim - 1])
            assert renewed == step.renewed, f"{step}: renewed={renewed}"
        elif isinstance(step, Forget):
            forgotten = await self.store.forget(step.principal)
            assert forgotten == step.count, f"{step}: {forgotten} forgotten"
        else:
            await self.wait(step.seconds)


async def opened(kind: str, limits: Limits, request: pytest.FixtureRequest, tmp_path) -> Played:
    """A new, empty store of `kind` with the tool's table, as a server opens it."""
    if kind == "postgresql":
        return Played(await PostgresStore.open(request.getfixturevalue("postgres_url"), limits, [WORK]), None)
    clock = FakeClock()
    if kind == "memory":
        return Played(MemoryStore(limits, clock, tables=[WORK]), clock)
    return Played(SQLiteStore(str(tmp_path / "store.db"), limits, clock, tables=[WORK]), clock)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("rule", list(RULES.values()), ids=list(RULES))
async def test_every_store_answers_each_step_of_a_rule_as_the_row_says(rule: Rule, kind: str, request, tmp_path):
    """Play a rule's steps in order on a new store of `kind`; the first answer off the row fails, naming its step."""
    played = await opened(kind, rule.limits, request, tmp_path)
    try:
        for number, step in enumerate(rule.steps, 1):
            try:
                await played.play(step)
            except AssertionError as wrong:
                wrong.add_note(f"at step {number} of the row, on the {kind} store")
                raise
    finally:
        await played.store.close()
