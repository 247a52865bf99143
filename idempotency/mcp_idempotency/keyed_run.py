"""A keyed call this server claimed, from its claim to its kept outcome, with a bound on every step.

A `KeyedRun` owns one claim: it runs the tool, renews the claim's lease apart from the tool, stops
the run at its deadline and records that it was stopped, or gives the key back. `Runs` holds every
keyed run of a server in a task group of the server's own, so a caller that cancels or goes away
stops waiting for its run, never the run, and the server's shutdown ends every run within a bound;
its beat asks each live run to renew its lease every quarter lease.
So a key is in progress for at most its deadline and a lease: a live run is ended at its deadline,
and a holder that died stops renewing, so its lease frees the key.
"""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError

from . import rules
from .outcomes import AsksAgain, Outcome, internal_error, recorded, rejection
from .rules import IN_PROGRESS, STORE_UNAVAILABLE
from .stores import Store, StoreUnavailable

__all__ = []

log = logging.getLogger("idempotency")

# What a run stopped at its deadline tells its caller, and every retry of its key: the tool may or may
# not have had its effect outside the store, so the caller checks before it sends the call again.
DEADLINE_PASSED = "the tool did not finish in {:g} s and was stopped; its effect is unknown: check, then use a new key"

# Seconds a server shutting down lets its keyed runs finish and be recorded before it stops them.
SHUTDOWN_GRACE = 5.0

SHUT_DOWN = "the server shut down before the call finished; nothing was recorded"

Work = Callable[[], Awaitable[tuple[Outcome, bool]]]  # the tool run and its outcome recorded: (outcome, recorded)


class KeyedRun:
    """One claimed call: its tool run under the claim's lease until its deadline, and what becomes of the claim."""

    def __init__(self, store: Store, key: str, store_key: str, fingerprint: bytes, owner: str, deadline: float):
        self.store, self.key, self.store_key, self.owner = store, key, store_key, owner
        self.fingerprint, self.deadline = fingerprint, deadline
        self.renewing = False  # a renewal of this claim is under way: the next waits for it to end
        self.held = True  # the claim is still ours to renew

    async def outcome(self, work: Work) -> Outcome:
        """Recorded; stopped at its deadline and recorded so; or given back: what the caller is told."""
        try:
            with anyio.move_on_after(self.deadline) as limit:
                outcome, recorded_now = await work()
            if limit.cancelled_caught:
                outcome, recorded_now = await self.stopped()
        except AsksAgain as asked:  # sent as it is, not recorded: the next leg claims the key
            await self.give_back()
            log.debug("released: key=%r, the client is asked to send it again", self.key)
            return asked.outcome
        except StoreUnavailable as error:  # a store failure is never an outcome: the client retries
            await self.give_back()
            log.warning("store unavailable: key=%r, nothing recorded (%s)", self.key, error)
            return rejection(STORE_UNAVAILABLE, self.key)
        except Exception:
            # Nothing leaves the key claimed: what failed here was not recorded,
            # so a retry runs the tool as if this call never came.
            await self.give_back()
            log.exception("released: key=%r, its outcome could not be recorded", self.key)
            return internal_error()
        except BaseException:  # stopped as the server shuts down: its unit of work rolled back, nothing kept
            with anyio.CancelScope(shield=True):
                await self.give_back()
            log.warning("released: key=%r, its run was stopped as the server shut down", self.key)
            raise
        if not recorded_now:
            # This instance stopped renewing (frozen, cut off from the store), a retry took the key
            # over and completed first, so this run's effect was rolled back: come back for the outcome.
            log.debug("lease lost: key=%r, its effect rolled back", self.key)
            return rejection(IN_PROGRESS, self.key)
        log.debug("recorded: key=%r", self.key)
        return outcome

    async def stopped(self) -> tuple[Outcome, bool]:
        """The deadline passed, the run was stopped and its unit of work rolled back: that failure, recorded."""
        # Recorded, not given back: the tool may have had an effect outside the store before it hung,
        # so a retry that ran it again could make that effect twice, or hang as long again. Every
        # retry is told instead that the effect is unknown, and never runs the tool under this key.
        log.warning("deadline passed: key=%r, its run was stopped after %g s", self.key, self.deadline)
        failure = MCPError(code=rules.INTERNAL_ERROR["code"], message=DEADLINE_PASSED.format(self.deadline))
        async with self.store.transaction() as tx:
            tx.complete(self.store_key, self.fingerprint, recorded(failure))
        return failure, tx.completed

    async def renew_lease(self) -> None:
        """One renewal of the claim's lease, bounded by the store's longest wait, so a live run is never taken over."""
        # Its own task, apart from the tool's: it never waits for the tool, and takes nothing its unit of work
        # holds. One at a time: a renewal that waited its longest (a third of the lease) and the next beat (a
        # quarter) still fall within a lease.
        self.renewing, wait = True, self.store.limits.wait
        try:
            with anyio.move_on_after(wait) as bound:
                self.held = await self.renewed()
            if bound.cancelled_caught:
                log.warning("lease not renewed: key=%r, the store did not answer in %g s", self.key, wait)
        finally:
            self.renewing = False

    async def renewed(self) -> bool:
        """One renewal: False once the claim is no longer ours (completed, taken over, forgotten)."""
        try:
            if await self.store.renew(self.store_key, self.owner):
                return True
        except Exception as error:  # a failed renewal is tried again at the next beat; the run goes on
            log.warning("lease not renewed: key=%r (%s)", self.key, error)
            return True
        log.debug("renewals end: key=%r is no longer held by this claim", self.key)
        return False

    async def give_back(self) -> None:
        """Release the claim; if the store cannot even do that, its lease frees the key."""
        try:
            await self.store.release(self.store_key, self.owner)
        except StoreUnavailable as error:
            log.warning("not released: key=%r is left to its lease (%s)", self.key, error)


class Runs:
    """Every keyed run of one server, each a task of the server's own task group: a caller that cancels or goes
    away (a client's timeout, a closed response stream) stops waiting, while the run completes and is recorded."""

    def __init__(self, group: TaskGroup):
        self.group = group
        self.live: dict[KeyedRun, anyio.Event] = {}  # each run under way, and the event set as it ends

    async def outcome(self, run: KeyedRun, work: Work) -> Outcome:
        """The run's outcome once it is kept; the run, a task of the server's own, goes on whatever befalls
        this caller."""
        ended, kept = anyio.Event(), []

        async def to_its_end() -> None:
            """The run, to its outcome or the server's shutdown."""
            try:
                kept.append(await self.run(run, work))
            finally:
                ended.set()

        self.group.start_soon(to_its_end)
        await ended.wait()
        return kept[0] if kept else rejection(STORE_UNAVAILABLE, run.key, SHUT_DOWN)

    async def run(self, run: KeyedRun, work: Work) -> Outcome:
        """`run` to its outcome in this task, its lease renewed on the beat while it is under way."""
        self.live[run] = ended = anyio.Event()
        try:
            return await run.outcome(work)
        finally:
            del self.live[run]
            ended.set()

    async def keep_leases(self, beat: float) -> None:
        """Every `beat` (a quarter lease), a renewal for each live run whose claim is still its own and whose
        last renewal has ended, each a task of its own."""
        # One beat for every run, not a timer per run: nearly every call ends before its first renewal
        # is due, and then it cost no task at all.
        while True:
            await anyio.sleep(beat)
            for run in list(self.live):
                if run.held and not run.renewing:
                    self.group.start_soon(run.renew_lease)

    async def ended(self) -> None:
        """Once every run started so far has ended."""
        for ended in list(self.live.values()):
            await ended.wait()


@asynccontextmanager
async def runs_kept(lease: float) -> AsyncIterator[Runs]:
    """The server's keyed runs while it serves, their leases renewed every quarter `lease`; as it shuts down,
    each has SHUTDOWN_GRACE seconds to finish, then is stopped, its unit of work rolled back and its key
    given back, so shutdown ends within a bound."""
    # Given back, not left to the lease: a stopped run kept nothing in the store, and its effect
    # elsewhere, if any, is the same for a retry on another instance now or a lease later.
    async with anyio.create_task_group() as group:
        runs = Runs(group)
        group.start_soon(runs.keep_leases, lease / 4)
        try:
            yield runs
        finally:
            with anyio.move_on_after(SHUTDOWN_GRACE, shield=True):
                await runs.ended()
            group.cancel_scope.cancel()
