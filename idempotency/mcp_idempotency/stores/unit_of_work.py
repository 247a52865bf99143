"""The unit of work: one policy for every store, over the few primitives each store provides.

The policy, written once here:

- it belongs to the task that opened it: `keys.transaction()` joins it, as a savepoint,
  only from that task; work the task spawns (during the call or after it) gets a unit of
  work of its own, and a statement sent through it from another task, or after it ended,
  is refused in one line instead of beginning a transaction nobody would end;
- nothing is sent until the first statement (a tool that waits before it writes holds
  nothing meanwhile); savepoints asked for before then begin with that statement;
- a failure of the store (not of the tool's own SQL) is latched: every later statement
  and the commit refuse, and the commit rolls everything back;
- the commit completes the record with the tool's writes if the key still runs for this
  request; else everything is rolled back (the completion is fenced off);
- only UnitOfWork's exit ends it, once, whatever happens, so the store is never left held.

A store provides: `send` (BEGIN if asked, savepoints, one statement), `finish` (the
completion, then COMMIT or ROLLBACK), `abandon` (ROLLBACK) and `store_failure` (which of
its driver's errors are its own failures rather than the tool's).
"""

import asyncio
import contextvars
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, NamedTuple

import anyio

from ..errors import IdempotencyError

__all__ = ["Row", "StoreUnavailable", "Transaction", "UnitOfWork", "UnitOfWorkMisused"]

Row = tuple[Any, ...]  # a row a tool's query returns, its columns in the query's order


class StoreUnavailable(IdempotencyError):
    """Raised by the store, or by a tool's unit of work, when the store itself failed (busy, locked, full, an I/O
    error, a lost connection): nothing was recorded, and the client sees a retryable store-unavailable rejection."""


class UnitOfWorkMisused(IdempotencyError, RuntimeError):
    """Raised to a tool that sends a statement through a unit of work from a task that does not own it, or after
    it ended; nothing is sent, and the tool's author sees one line saying so."""


class Completion(NamedTuple):
    """The record to complete with the commit: the key, the request's fingerprint, the outcome recorded."""

    key: str
    fingerprint: bytes
    outcome: str


async def take(lock: anyio.Lock, seconds: float, why: str) -> None:
    """Take `lock`, waiting `seconds` at most; else the store is unavailable, for `why`."""
    try:
        lock.acquire_nowait()  # nearly always free: no timer to set up
    except anyio.WouldBlock:
        try:
            with anyio.fail_after(seconds):
                await lock.acquire()
        except TimeoutError:
            raise StoreUnavailable(why) from None


def this_task() -> object:
    """The running task, compared by identity: asyncio's own where it runs (a tenth of anyio's cost), else anyio's."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # another event loop than asyncio's
        return anyio.get_current_task().id


class Transaction(ABC):
    """The statements of one unit of work, owned by the task that opened it (see the module's policy)."""

    def __init__(self) -> None:
        self.owner = this_task()
        self.failure: StoreUnavailable | None = None  # the store failure this unit of work met, named, if any
        self.savepoints: list[str] = []  # open savepoints, innermost last
        self.unsent = 0  # how many of the innermost savepoints have not yet begun
        self.names = itertools.count(1)
        self.completion: Completion | None = None
        self.completed = False  # the commit completed the record: this execution is the one recorded
        self.begun = False  # BEGIN succeeded: the store's connection (and, on SQLite, its writer) is held
        self.ended = False  # its exit ran: nothing may join it, or send through it, any more

    # -- what each store provides --

    @abstractmethod
    async def send(self, begin: bool, savepoints: list[str], statement: Callable[[Any], Any]) -> Any:
        """Run `statement(connection)`, after BEGIN (if `begin`, setting `begun`) and these SAVEPOINTs."""

    @abstractmethod
    async def finish(self, completion: Completion | None) -> bool:
        """Apply the completion (beginning if need be), then COMMIT if it applied or there was none, else
        ROLLBACK; the connection given back whatever happens. Whether the completion applied."""

    @abstractmethod
    async def abandon(self) -> None:
        """ROLLBACK the begun transaction; the connection given back whatever happens."""

    @abstractmethod
    def store_failure(self, error: Exception) -> StoreUnavailable | None:
        """`error` as a failure of the store, named for the log; None for the tool's own (its SQL, its data)."""

    # -- the tool's statements: one SQL text, $1, $2... for its arguments, on every store --

    @abstractmethod
    async def execute(self, sql: str, *args: object) -> int:
        """Run one statement; how many rows an INSERT, UPDATE or DELETE changed (else 0)."""

    @abstractmethod
    async def fetchall(self, sql: str, *args: object) -> list[Row]:
        """Run one query; its rows, as tuples."""

    async def fetchone(self, sql: str, *args: object) -> Row | None:
        """Run one query; its first row, as a tuple, or None."""
        rows = await self.fetchall(sql, *args)
        return rows[0] if rows else None

    @abstractmethod
    async def lock(self, name: str) -> None:
        """Hold the lock `name` until this unit of work ends: another unit of work asking for it waits meanwhile."""

    def complete(self, key: str, fingerprint: bytes, outcome: str) -> None:
        """Record the outcome with the commit, if the key still runs for this request (the first completion
        wins); else the commit rolls back every statement of this unit of work, and `completed` says False."""
        self.completion = Completion(key, fingerprint, outcome)

    # -- the policy --

    def joinable(self) -> bool:
        """May `keys.transaction()`, entered now, join this unit of work? Only from its own task, before its end."""
        return not self.ended and self.owner == this_task()

    async def run(self, statement: Callable[[Any], Any]) -> Any:
        """Every statement of this unit of work, the tool's and the store's own, goes through here."""
        if self.ended or self.owner != this_task():
            # Sending it would begin a transaction on the store that no one ends, holding it for good.
            why = "has ended" if self.ended else "belongs to the task that opened it"
            raise UnitOfWorkMisused(f"this unit of work {why}: open one here, `async with keys.transaction() as tx`")
        if self.failure is not None:
            raise self.failure
        begin, savepoints = not self.begun, self.pending()
        return await self.guarded(self.send(begin, savepoints, statement))

    async def guarded(self, step: Any) -> Any:
        """Await one step on the store: a failure of the store is latched and raised as StoreUnavailable; an error
        of the tool's own statement is the tool's, raised as it is."""
        try:
            return await step
        except StoreUnavailable as error:
            self.failure = self.failure or error
            raise
        except Exception as error:
            failure = self.store_failure(error)
            if failure is None:
                raise
            self.failure = self.failure or failure
            raise failure from error

    def savepoint(self) -> str:
        """Open a nested unit of work; it begins with the next statement."""
        name = f"nested_{next(self.names)}"
        self.savepoints.append(name)
        self.unsent += 1
        return name

    def pending(self) -> list[str]:
        """The names of the savepoints to begin with the next statement, now counted as begun."""
        names = self.savepoints[len(self.savepoints) - self.unsent :]
        self.unsent = 0
        return names

    async def end_savepoint(self, name: str, failed: bool) -> None:
        """Close a nested unit of work: kept, or rolled back to where it began."""
        self.savepoints.remove(name)
        if self.unsent:  # never begun: nothing ran inside it, nothing to undo
            self.unsent -= 1
        elif failed and self.failure is None:
            await self.execute(f"ROLLBACK TO SAVEPOINT {name}")
        # A kept savepoint is not released: COMMIT releases it, with no trip of its own.

    async def end(self, succeeded: bool) -> None:
        """UnitOfWork's exit, once: commit (completing the record) on success, else roll back."""
        self.ended = True
        if not succeeded or self.failure is not None:
            if self.begun:
                await self.guarded(self.abandon())
            if succeeded and self.failure is not None:  # a unit of work that failed part way commits nothing
                raise self.failure
            return
        if self.begun or self.completion is not None:
            self.completed = await self.guarded(self.finish(self.completion))


# The unit of work open in this context, if any. The dispatch layer opens one around a
# keyed tool call; the tool's own `transaction()` joins it as a savepoint rather than
# committing on its own, as nested atomic() blocks do in Django: so a tool holds no
# idempotency code, and its writes commit, or roll back, with the record. A spawned task
# inherits the variable with the context: `joinable` keeps it out.
_open_transaction: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("open", default=None)


class UnitOfWork:
    """`async with store.transaction() as tx:` a savepoint in this task's open unit of work if there is one,
    else a new one; committed (or kept) on success, rolled back on any error. Its exit is the one place a
    unit of work ends."""

    def __init__(self, begin: Callable[[], Transaction]):
        self.begin = begin

    async def __aenter__(self) -> Transaction:
        outer = _open_transaction.get()
        self.outer = outer if outer is not None and outer.joinable() else None
        if self.outer is not None:
            self.savepoint = self.outer.savepoint()
            return self.outer
        self.tx = self.begin()
        self.token = _open_transaction.set(self.tx)
        return self.tx

    async def __aexit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):  # a cancelled caller must still release the store
            if self.outer is not None:
                await self.outer.end_savepoint(self.savepoint, failed=error_type is not None)
                return
            _open_transaction.reset(self.token)
            await self.tx.end(error_type is None)
