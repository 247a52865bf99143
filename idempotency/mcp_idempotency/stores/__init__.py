"""Where the idempotency records live, shared by every instance, and the unit of work a tool joins.

One interface, three stores, one module each, chosen by URL:

    memory                 memory.py: this process's dicts; a retry that lands on another
                           instance, or after a restart, finds nothing (what a
                           shared store exists to prevent, offered to show it)
    sqlite:PATH            sqlite.py: one file, several processes on one machine (the default)
    postgresql://...       postgres.py: one server, several machines; its clock is the only
                           clock; its tables and claim function are postgres_v4*.sql

Every store answers what the dispatch layer asks:

    claim(key, fingerprint, principal)
                              The record that holds the key (read first, with
                              no lock, so most retries cost a read), or else the key taken in
                              one atomic step, or a takeover of a claim whose lease passed;
                              Refused when the store, or this principal's share of
                              it, is full
    renew(key, owner)         the holder, alive, moves its lease on while the tool
                              runs, so a retry is never let in on a live run
    release(key, owner)       the key given back, so the retry runs the tool again
    forget(principal)         every record of one principal, running or completed, deleted
                              (an account closed, a data-protection request): how many
    transaction()             a unit of work; the tool's own writes join the one the
                              dispatch layer opened (as a savepoint), and
                              tx.complete() has the commit complete the record with them,
                              or roll both back (fencing)

A store keeps the records and the unit of work, nothing else. A tool keeps its own
data in the same store through the unit of work, in one SQL that runs unchanged on
every store (the memory store keeps a tool's data in a private in-memory SQLite):

    async with keys.transaction() as tx:
        await tx.execute("UPDATE ledger SET balance = balance + $1", amount)
        row = await tx.fetchone("SELECT balance FROM ledger")

and declares its tables to open_store (`tables`), which makes them as the store opens.
mcp_idempotency_demo/ledger.py is such a tool.

A store that fails (busy, locked, full, an I/O error, a lost connection) raises
StoreUnavailable, and a unit of work that met one says so in `failure`: the dispatch
layer then records nothing, gives the key back and tells the client to retry. An error
of the tool's own statement (its SQL, its data) is the tool's: it propagates as it is.
The unit of work's policy is unit_of_work.py's, the same on every store.

Every record is running (its deadline is the lease's end, moved on by each renewal)
or completed (its deadline is the retention window's end). A record past its deadline reads as
absent, or as free to take over (`may_take` below says which); the bound is kept by a count, and expired
records are purged only when the count reaches it. A principal's share counts its
records whose deadline has not passed, and a record that expires frees its place at once.
The SQL stores keep a count of each principal's records, live or expired, beside the
store's own: a claim reads it, and walks the principal's records (an index on
(principal, deadline)) only when that count exceeds the share, once the principal's
expired completed records are purged.
"""

import itertools
import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

import anyio

from ..errors import IdempotencyError, InvalidSetting
from ..rules import DEADLINE_SECONDS, MAX_KEY_LENGTH, MAX_RECORDS, MAX_RECORDS_PER_PRINCIPAL, RETENTION_SECONDS
from .unit_of_work import Row, StoreUnavailable, Transaction, UnitOfWork, UnitOfWorkMisused

__all__ = [
    "Limits",
    "Misconfigured",
    "OtherSchema",
    "Row",
    "StoreUnavailable",
    "Transaction",
    "UnitOfWork",
    "UnitOfWorkMisused",
    "open_store",
]

# ----------------------------------------------------------------------------
# What a claim returns, and what a store keeps to
# ----------------------------------------------------------------------------


class Won(NamedTuple):
    """This call holds the key: it may run the tool. `owner` is its fencing token."""

    owner: str


class Held(NamedTuple):
    """A record holds the key: its fingerprint, and its outcome once completed."""

    fingerprint: bytes
    outcome: str | None  # None: still running, within its lease


class Full(NamedTuple):
    """The store, or the principal's share of it, holds all the live records it may: a new key is refused."""


def may_take(status: str, stored_fingerprint: bytes, deadline_passed: bool, fingerprint: bytes) -> bool:
    """May a claim for `fingerprint` take the key from the record that holds it?

    Only once the record's deadline has passed: a completed record has then expired, and
    the key is new to any request; a running one's lease has passed, and the same request
    takes it over, while another request under the key is still a conflict (it must never
    run with the original's key). This is the rule's one statement in Python: the memory
    store calls it, and the SQL stores' copies, which must decide inside the database in
    one atomic step, are checked against it by the repository's store tests."""
    return deadline_passed and (status == "completed" or stored_fingerprint == fingerprint)


# The longest any statement waits for a lock, or a writer for the file. A unit of
# work that waited most of its lease would find its key taken over anyway;
# failing sooner gives the key back while the client still retries.
LONGEST_WAIT = 10.0
# How long a holder that stopped renewing (killed, frozen, cut off) keeps its key;
# a live one renews every quarter of it, however long its tool runs.
LEASE_SECONDS = 30.0
# The shortest lease a holder can keep: it renews every quarter lease, and a renewal may wait
# a third of it for the store; below a second, one slow statement or a busy event loop lets
# the lease pass before its renewal lands, and a live run is taken over.
SHORTEST_LEASE = 1.0


@dataclass(frozen=True)
class Limits:
    """The windows and the bounds every store enforces, the longest key the layer
    takes, which it advertises beside the window, and how long a keyed run may take."""

    retention: float = RETENTION_SECONDS  # seconds a completed record is replayed
    lease: float = LEASE_SECONDS  # seconds a holder that stopped renewing keeps its claim from a takeover
    max_records: int = MAX_RECORDS  # live records at most, running or completed
    max_records_per_principal: int = MAX_RECORDS_PER_PRINCIPAL  # one principal's records whose deadline is ahead
    max_key_length: int = MAX_KEY_LENGTH  # characters in a key at most; the store holds whatever it is given
    deadline: float = DEADLINE_SECONDS  # seconds a keyed run may take before it is stopped, unless its tool has its own

    def __post_init__(self) -> None:
        """Refuse, at construction, a limit that would void a guarantee: each must be finite and above zero."""
        # A window of 0 replays nothing, a lease of 0 lets every retry take a running call
        # over, a bound of 0 refuses every keyed call: none is a configuration, all are typos.
        # An infinite one is no bound: a hung tool would hold its key for ever.
        for name in ("retention", "lease", "max_records", "max_records_per_principal", "max_key_length", "deadline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                raise InvalidSetting(f"Limits({name}={value!r}): {name} must be a finite number above zero")
        if self.lease < SHORTEST_LEASE:
            raise InvalidSetting(
                f"Limits(lease={self.lease!r}): a lease must be {SHORTEST_LEASE:g} s or more: "
                "a shorter one passes before its renewal lands"
            )

    @property
    def wait(self) -> float:
        """How long a statement may wait for a lock, or a writer for the file, before the store gives up."""
        return min(LONGEST_WAIT, self.lease / 3)


# A fencing token names one claim, and is never reused by any instance: this
# process's random name and a count. It never leaves the server, so it need not be
# secret, and counting is cheaper than drawing 128 random bits for every claim.
PROCESS = uuid.uuid4().hex
claims_made = itertools.count()


def new_owner() -> str:
    """A token no other claim has, so a claim can be given back only by its holder."""
    return f"{PROCESS}-{next(claims_made)}"


# ----------------------------------------------------------------------------
# The SQL stores' schema version, and the one step from the version before
# ----------------------------------------------------------------------------

# Version 4: the records, their count, and each principal's count, nothing else.
# Version 3 lacked the count per principal: it is brought to 4 in place by counting
# each principal's records once. Version 2 held the demo's ledger too and had no
# principal column: it goes through 3, every record kept with its principal, and so is
# the ledger's table, which the demo's ledger module then finds as its own. Version 1
# (NULL patterns across columns) cannot be: its records are not this layout's.
SCHEMA_VERSION = 4
UPGRADABLE = (2, 3)
UPGRADE = "mcp-idempotency-store upgrade"  # stores/command.py


class Misconfigured(IdempotencyError):
    """Raised as the store opens (at the server's start, or by `mcp-idempotency-store`) when it cannot open as
    configured; the operator sees one line that names the fix, and the server does not start."""


class OtherSchema(Misconfigured):
    """Raised as the store opens, or by `mcp-idempotency-store upgrade`, when it holds another schema version than
    this code reads; the operator sees one line saying what to do (the upgrade command, or an empty database)."""


def tables_refusal(number: int, error: Exception, again: bool) -> Misconfigured:
    """The one line for a tool's schema statement that fails as the store opens, or would on the next start."""
    if again:  # it ran once, and failed run again: the next start would stop on it
        fix = "let it allow for what it made before (CREATE TABLE IF NOT EXISTS, INSERT ... WHERE NOT EXISTS)"
        return Misconfigured(f"the tools' table statement {number} would fail on the next start ({error}): {fix}")
    return Misconfigured(f"the tools' table statement {number} failed ({error}): correct it")


def refusal(url: str, found: int, otherwise: str) -> OtherSchema:
    """The one line for a store of version `found`: the command that upgrades it, or `otherwise`."""
    remedy = f"upgrade it in place with: {UPGRADE} {url}" if found in UPGRADABLE else otherwise
    return OtherSchema(f"it holds schema version {found}, and this code reads version {SCHEMA_VERSION}; {remedy}")


def must_create(url: str, found: int, otherwise: str) -> bool:
    """At start, a store of version `found` (0: nothing there yet) is created, used as it is, or refused."""
    if found not in (0, SCHEMA_VERSION):
        raise refusal(url, found, otherwise)
    return found == 0


def must_upgrade(url: str, found: int, otherwise: str) -> bool:
    """For `mcp-idempotency-store upgrade`, a store of version `found` is upgraded, left as it is, or refused."""
    if found == 0:
        raise OtherSchema("it holds no store, so there is nothing to upgrade: a server creates one there as it starts")
    if found not in (*UPGRADABLE, SCHEMA_VERSION):
        raise refusal(url, found, otherwise)
    return found in UPGRADABLE


class Store(ABC):
    """A place for records that every instance of the server shares (or not: memory)."""

    url: str

    def __init__(self, limits: Limits):
        self.limits = limits

    @abstractmethod
    async def claim(self, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        """The record that holds `key` (an expired one counts as absent,
        a running one whose lease passed is taken over by the same request), or the key taken
        for `principal` (rules.principal_name), unless the store or that principal's share is full."""

    @abstractmethod
    async def release(self, key: str, owner: str) -> None:
        """Give the key back (drop its running record) if `owner` still holds it, so a retry runs anew."""

    @abstractmethod
    async def renew(self, key: str, owner: str) -> bool:
        """Move the lease of `owner`'s running claim on by a whole lease; False if it is no longer
        theirs (taken over, given back, forgotten, or completed)."""

    @abstractmethod
    async def forget(self, principal: str) -> int:
        """Delete every record of `principal`, running or completed; how many there were. A call of
        theirs running meanwhile finds its record gone: its completion is fenced off."""

    @abstractmethod
    def begin(self) -> Transaction:
        """A new unit of work, not yet started."""

    async def close(self) -> None:  # noqa: B027 (the memory store holds nothing to give back)
        """Give back connections and files."""

    def transaction(self) -> UnitOfWork:
        """A unit of work that commits on success and rolls back on any error; nested in this task, a savepoint."""
        return UnitOfWork(self.begin)


# ----------------------------------------------------------------------------
# Choosing a store
# ----------------------------------------------------------------------------


def checked_url(url: str) -> str:
    """A store URL this package can open, or one line saying why not and what to do: at construction, not at start."""
    if url == "memory" or (url.startswith("sqlite:") and url.removeprefix("sqlite:")):
        return url
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import asyncpg  # noqa: F401 (only asked whether it is there)
        except ImportError:
            raise ModuleNotFoundError(
                "a postgresql:// store needs the asyncpg driver: pip install 'mcp-idempotency[postgres]'"
            ) from None
        return url
    raise InvalidSetting(f"unknown store {url!r}: use memory, sqlite:PATH or postgresql://USER@HOST/DATABASE")


@asynccontextmanager
async def open_store(url: str, limits: Limits, tables: Sequence[str] = ()) -> AsyncIterator[Store]:
    """The store a URL names: memory, sqlite:PATH or postgresql://...; closed on exit.

    `tables` are the tools' own schema statements, run in order beside the records' as the
    store opens, under its schema lock, so instances starting together on an empty store
    take turns; every start runs them, so each must allow for what it made before
    (CREATE TABLE IF NOT EXISTS, an INSERT ... WHERE NOT EXISTS): they run twice as the store
    opens, the second run undone, so one that would fail on the next start fails on this one.

    A store that cannot open as configured (no folder for the file, no server, no such
    database, a statement that fails) raises Misconfigured, its message one line that names the fix."""
    checked_url(url)
    store = await opened(url, limits, tables)
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


async def opened(url: str, limits: Limits, tables: Sequence[str]) -> Store:
    """The store a checked URL names, open."""
    if url == "memory":
        from .memory import MemoryStore

        return MemoryStore(limits, tables=tables)
    if url.startswith("sqlite:"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:"), limits, tables=tables)
    from .postgres import PostgresStore

    return await PostgresStore.open(url, limits, tables)


def shown(url: str) -> str:
    """The URL, as a log may show it: its password left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()
