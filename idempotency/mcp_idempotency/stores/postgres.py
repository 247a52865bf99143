"""postgresql: one server, several machines; its clock is the only clock.

The tables are stores/postgres_v4.sql, and the count of each principal's records, its
triggers and the claim function postgres_v4_claim.sql, created once on an empty database;
a database holding another version is refused in one line, which names
`mcp-idempotency-store upgrade URL` for versions 2 and 3 (see `upgrade`).

Every wait is bounded: a lock for `limits.wait` (then a claim answers in
progress, a unit of work gives up), a statement for a lease, a session idle inside
a transaction for a lease and a wait (a frozen instance's locks are freed), a
command the client sent for a lease, a pooled connection for `limits.wait`. The
isolation level is pinned to READ COMMITTED, whatever the server's default: the
claim relies on each statement seeing what committed before it.

Behind a pooler in transaction mode (pgbouncer), the URL says so: `?pooler=transaction`.
Every lock is transaction-scoped already. A pooled connection is another server session
from one transaction to the next, so the store then rests nothing on the session: it
sends no session settings (pgbouncer refuses them at connect) but finds them on the
database, or refuses to start with the one line that sets them; and it turns asyncpg's
named prepared statements off (pgbouncer before 1.21 loses them), so each statement
takes two round trips instead of one. Tested behind pgbouncer 1.18.
"""

import contextlib
import time
from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import asyncpg

from ..rules import principal_of
from . import (
    SCHEMA_VERSION,
    Full,
    Held,
    Limits,
    Misconfigured,
    Row,
    Store,
    StoreUnavailable,
    Transaction,
    Won,
    must_create,
    must_upgrade,
    new_owner,
    tables_refusal,
)
from .unit_of_work import Completion

__all__ = []

CLAIM_FUNCTION = files(__package__).joinpath(f"postgres_v{SCHEMA_VERSION}_claim.sql").read_text()
SCHEMA = files(__package__).joinpath(f"postgres_v{SCHEMA_VERSION}.sql").read_text() + CLAIM_FUNCTION
OTHERWISE = "use an empty database"  # for a version that cannot be upgraded in place

# Which version the database holds: 0 for none at all, 1 for the layout before the
# version was recorded. Instances starting together take turns (a lock that ends
# with the transaction, so no pooled connection keeps it).
TABLES_FOUND = "SELECT to_regclass('idempotency_schema') IS NOT NULL, to_regclass('idempotency_records') IS NOT NULL"

CLAIM = "SELECT status, fingerprint, outcome FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7)"

# What a claim that waited too long on the key's row answers: that row is
# locked by an instance completing or taking over the key, so it is in progress.
HOLDER = "SELECT fingerprint, outcome FROM idempotency_records WHERE key = $1"

# Only the claim's holder gives it back; the counts follow, by the table's triggers.
RELEASE = "DELETE FROM idempotency_records WHERE key = $1 AND status = 'running' AND owner = $2"

# The holder, alive, moves its lease on; a claim taken over or given back is no longer its own.
RENEW = """
UPDATE idempotency_records SET deadline = clock_timestamp() + make_interval(secs => $3)
WHERE key = $1 AND status = 'running' AND owner = $2
"""

# Every record of one principal; the counts follow, by the table's triggers.
FORGET = "DELETE FROM idempotency_records WHERE principal = $1"

# Version 2 to 3: each record gains its principal, read from its key in Python
# (rules.principal_of: the JSON the layer wrote, which SQL's JSON would print otherwise),
# and version 2's claim function, which took none, goes.
UPGRADE_FROM_2 = [
    "ALTER TABLE idempotency_records ADD COLUMN principal text NOT NULL DEFAULT ''",
    "DROP FUNCTION idempotency_claim(text, bytea, text, float8, bigint)",
]
UPGRADED_TO_3 = [
    "ALTER TABLE idempotency_records ALTER COLUMN principal DROP DEFAULT",
    "CREATE INDEX idempotency_records_share ON idempotency_records (principal, deadline)",
]
# Version 3 to 4, with no record inserted or deleted meanwhile (a claim of a server not yet
# stopped waits): each principal's records counted once, the triggers that keep the counts
# from then on, the claim function that reads them (in place of version 3's).
UPGRADE_FROM_3 = [
    "LOCK TABLE idempotency_records IN SHARE ROW EXCLUSIVE MODE",
    CLAIM_FUNCTION,
    "INSERT INTO idempotency_shares SELECT principal, count(*) FROM idempotency_records GROUP BY principal",
    f"UPDATE idempotency_schema SET version = {SCHEMA_VERSION}",
]

# The first completion of a running key for this request wins; any other is fenced off.
COMPLETION = """
UPDATE idempotency_records
SET status = 'completed', outcome = {outcome}, deadline = clock_timestamp() + make_interval(secs => {retention}),
    owner = NULL
WHERE key = {key} AND status = 'running' AND fingerprint = {fingerprint}
"""
COMPLETE = COMPLETION.format(key="$1", fingerprint="$2", outcome="$3", retention="$4")

# The completion sent with the COMMIT of the unit of work it ends, in one trip: one query
# string of two statements, so no parameters, each value a literal (`literal`). A completion
# that finds its key no longer running divides by zero, which aborts the transaction, so the
# COMMIT after it never runs: the run was fenced off, and nothing of it is kept.
COMPLETE_AND_COMMIT = "WITH completed AS ({completion} RETURNING 1) SELECT 1 / count(*)::int FROM completed; COMMIT"

# A tool's lock (Transaction.lock): a number of its name, held to the end of the unit of work.
LOCK = "SELECT pg_advisory_xact_lock(hashtext($1))"

# The store's own failures, by SQLSTATE: its connection (08), its resources, a disk full
# among them (53), an operator or a timeout ending the statement (57), the system (58),
# an internal error (XX), a transaction rolled back to be retried (40), a lock not had
# within lock_timeout (55P03), a session ended idle in its transaction (25P03). Every
# other error the server raises (a syntax error, no such table, a constraint broken, a
# wrong value) comes from the tool's own statement, and is the tool's.
STORE_FAILURE_CLASSES = ("08", "53", "57", "58", "XX", "40")
STORE_FAILURE_STATES = ("55P03", "25P03")
# Every error the store's own statements (a claim, a renewal) may meet: each is the store failing.
# Of a tool's, so are the driver's and the network's, but asyncpg's refusal of the tool's own
# arguments (an InterfaceError that is a ValueError too).
STORE_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)

# What a developer reads when PostgreSQL ended a unit of work left idle in its transaction.
SAT_IDLE = (
    "PostgreSQL: the unit of work sat idle in its transaction longer than idle_in_transaction_session_timeout "
    "({seconds:g} s), and the server ended its session ({error}); do slow work (a payment, a mail) before the "
    "unit of work's first statement"
)


def literal(text: str) -> str:
    """`text` as a PostgreSQL literal that reads back as it is, whatever it holds and however the server
    treats backslashes: dollar-quoted, under a tag the text does not contain (so neither can its end)."""
    tag = "idempotency"
    while tag in text:
        tag += "_"
    return f"${tag}${text}${tag}$"


def failed(error: Exception) -> StoreUnavailable:
    """A store failure, named for the log."""
    return StoreUnavailable(f"PostgreSQL: {type(error).__name__}: {error}")


def is_store_failure(error: Exception) -> bool:
    """Is `error` the store failing, rather than the tool's own statement (see STORE_FAILURE_CLASSES)?"""
    if isinstance(error, asyncpg.PostgresError):
        state = str(error.sqlstate or "")
        return state[:2] in STORE_FAILURE_CLASSES or state in STORE_FAILURE_STATES
    return isinstance(error, STORE_FAILURES) and not isinstance(error, ValueError)


def idle_timeout(limits: Limits) -> float:
    """How long a session may sit idle in its transaction: a lease and a wait. A live process keeps its units
    of work awake as it renews its claims (keep_awake), so only one frozen or cut off loses its locks so."""
    return limits.lease + limits.wait


def milliseconds(seconds: float) -> str:
    return str(int(seconds * 1000))


def session_settings(limits: Limits) -> dict[str, str]:
    """Every wait bounded; the isolation level pinned."""
    return {
        "default_transaction_isolation": "read committed",
        "lock_timeout": milliseconds(limits.wait),
        "statement_timeout": milliseconds(limits.lease),
        "idle_in_transaction_session_timeout": milliseconds(idle_timeout(limits)),
    }


async def found_version(db: Any) -> int:
    """The schema version the database holds, once this transaction alone may create or upgrade it."""
    await db.execute("SELECT pg_advisory_xact_lock(3182)")
    versioned, records = await db.fetchrow(TABLES_FOUND)
    return int(await db.fetchval("SELECT max(version) FROM idempotency_schema") if versioned else records)


async def create_schema(db: Any, url: str, tables: Sequence[str]) -> None:
    """Create the tables once, however many instances start together, and then the tools' own (see
    open_store) under the same lock, twice, the second run undone; refuse another version in one line."""
    async with db.transaction():
        if must_create(url, await found_version(db), OTHERWISE):
            await db.execute(SCHEMA)
        for again in (False, True):
            await db.execute("SAVEPOINT again")
            for number, statement in enumerate(tables, 1):
                try:
                    await db.execute(statement)
                except asyncpg.PostgresError as error:
                    if is_store_failure(error):
                        raise
                    raise tables_refusal(number, error, again) from None
        await db.execute("ROLLBACK TO SAVEPOINT again")  # the second run: only a rehearsal of the next start


async def upgrade(url: str) -> int:
    """`mcp-idempotency-store upgrade postgresql://...`: version 2 or 3 becomes 4 in place; the version it held.
    From 2, every record gains its principal; then each principal's records are counted, and the claim
    function reads the counts. The demo's ledger stays as it is."""
    # One connection, no prepared statements kept: it works behind a transaction-mode pooler too.
    db = await asyncpg.connect(behind_pooler(url)[0], statement_cache_size=0)
    try:
        async with db.transaction():
            found = await found_version(db)
            if must_upgrade(url, found, OTHERWISE):
                if found == 2:
                    await upgrade_from_2(db)
                for statement in UPGRADE_FROM_3:
                    await db.execute(statement)
    finally:
        await db.close()
    return found


async def upgrade_from_2(db: Any) -> None:
    """Version 2 to 3, inside the upgrade's transaction: every record gains its principal, read from its key."""
    for statement in UPGRADE_FROM_2:
        await db.execute(statement)
    keys = [row["key"] for row in await db.fetch("SELECT key FROM idempotency_records")]
    named = [(key, principal_of(key)) for key in keys]
    await db.executemany("UPDATE idempotency_records SET principal = $2 WHERE key = $1", named)
    for statement in UPGRADED_TO_3:
        await db.execute(statement)


# What the URL adds to say that a transaction-mode pooler sits between (see the docstring).
POOLER = ("pooler", "transaction")


def behind_pooler(url: str) -> tuple[str, bool]:
    """The URL asyncpg reads, and whether it named a transaction-mode pooler."""
    parts = urlsplit(url)
    options = parse_qsl(parts.query)
    kept = [option for option in options if option != POOLER]
    return parts._replace(query=urlencode(kept)).geturl(), len(kept) < len(options)


async def check_database_settings(db: Any, limits: Limits) -> None:
    """Behind a pooler, the session settings must be the database's own; else refuse, saying how to set them."""
    wanted = session_settings(limits)
    found = dict(await db.fetch("SELECT name, setting FROM pg_settings WHERE name = any($1::text[])", list(wanted)))
    if found != wanted:
        database = await db.fetchval("SELECT current_database()")
        fix = "; ".join(f"ALTER DATABASE {database} SET {name} = '{value}'" for name, value in wanted.items())
        raise Misconfigured(
            f"behind a pooler the store needs these settings on the database: {fix}; "
            "then make the pooler open new connections (pgbouncer: RECONNECT)"
        )


class PostgresStore(Store):
    """One PostgreSQL database, through asyncpg's connection pool."""

    def __init__(self, url: str, limits: Limits, pool: Any):
        super().__init__(limits)
        self.url, self.pool = url, pool
        self.open_units: set[PostgresTransaction] = set()  # the units of work of this process holding a connection

    @classmethod
    async def open(cls, url: str, limits: Limits, tables: Sequence[str] = ()) -> "PostgresStore":
        # Each connection is used for one transaction at a time and keeps no session
        # state, so the pool need not reset it on release: that is a round trip a use.
        given, (url, pooled) = url, behind_pooler(url)
        session = {"statement_cache_size": 0} if pooled else {"server_settings": session_settings(limits)}
        pool = await connected(url, limits, session)
        try:
            async with pool.acquire() as db:
                if pooled:
                    await check_database_settings(db, limits)
                await create_schema(db, given, tables)  # the URL as given: the refusal names the command to run on it
        except BaseException:
            await pool.close()
            raise
        return cls(url, limits, pool)

    async def close(self) -> None:
        await self.pool.close()

    def connection(self) -> Any:
        """A pooled connection, waited for `limits.wait` at most."""
        return self.pool.acquire(timeout=self.limits.wait)

    async def claim(self, key: str, fingerprint: bytes, principal: str) -> Won | Held | Full:
        owner = new_owner()
        bounds = (self.limits.lease, self.limits.max_records, self.limits.max_records_per_principal)
        try:
            async with self.connection() as db:
                try:
                    row = await db.fetchrow(CLAIM, key, principal, fingerprint, owner, *bounds)
                except asyncpg.LockNotAvailableError as waited:  # one completing the key holds its row
                    row = await db.fetchrow(HOLDER, key)
                    if row is None:  # it was given back meanwhile: the client may retry at once
                        raise failed(waited) from waited
                    return Held(bytes(row["fingerprint"]), row["outcome"])
        except STORE_FAILURES as error:
            raise failed(error) from error
        if row["status"] == "won":
            return Won(owner)
        if row["status"] == "full":
            return Full()
        return Held(bytes(row["fingerprint"]), row["outcome"])

    async def release(self, key: str, owner: str) -> None:
        try:
            async with self.connection() as db:
                await db.execute(RELEASE, key, owner)
        except STORE_FAILURES as error:
            raise failed(error) from error

    async def renew(self, key: str, owner: str) -> bool:
        try:
            async with self.connection() as db:
                renewed: str = await db.execute(RENEW, key, owner, self.limits.lease)
        except STORE_FAILURES as error:
            raise failed(error) from error
        for unit in list(self.open_units):
            await unit.keep_awake()
        return renewed == "UPDATE 1"

    async def forget(self, principal: str) -> int:
        try:
            async with self.connection() as db:
                forgotten: str = await db.execute(FORGET, principal)  # "DELETE 3"
        except STORE_FAILURES as error:
            raise failed(error) from error
        return int(forgotten.split()[-1])

    def begin(self) -> Transaction:
        return PostgresTransaction(self)


async def connected(url: str, limits: Limits, session: dict[str, Any]) -> Any:
    """A pool of connections to the database the URL names; else one line that names the fix."""
    try:
        return await asyncpg.create_pool(
            url, min_size=1, max_size=10, reset=no_reset, command_timeout=limits.lease, **session
        )
    except asyncpg.InvalidCatalogNameError as error:
        raise Misconfigured(f"{error}: create it (createdb), or name another in the URL") from None
    except asyncpg.InvalidAuthorizationSpecificationError as error:
        raise Misconfigured(f"{error}: create the role, or name another user and password in the URL") from None
    except asyncpg.ProtocolViolationError as error:  # pgbouncer refusing the session's settings as it starts
        raise Misconfigured(f"{error}: behind a transaction-mode pooler, add ?pooler=transaction to the URL") from None
    except (OSError, TimeoutError) as error:
        where = f"{urlsplit(url).hostname or 'localhost'}:{urlsplit(url).port or 5432}"
        raise Misconfigured(f"no PostgreSQL answers at {where} ({error}): start it, or name another host") from None


async def no_reset(_connection: Any) -> None:
    """What a pooled connection needs on release: nothing (see PostgresStore.open)."""


class PostgresTransaction(Transaction):
    """A pooled connection and BEGIN at the first statement, held to the end of the unit of work."""

    def __init__(self, store: PostgresStore):
        super().__init__()
        self.store = store
        self.db: Any = None  # the pooled asyncpg connection, from the first statement to COMMIT or ROLLBACK
        self.last = time.monotonic()  # when its last statement ended
        self.idle = 0.0  # how long it had sat idle in its transaction when its latest statement was sent
        self.using = anyio.Lock()  # one statement at a time on its connection: the tool's, or a keep_awake

    async def send(self, begin: bool, savepoints: list[str], statement: Callable[[Any], Any]) -> Any:
        opening = ["BEGIN ISOLATION LEVEL READ COMMITTED"] if begin else []
        if begin:
            self.db = await self.store.pool.acquire(timeout=self.store.limits.wait)
            self.begun = True  # the connection is this unit of work's until it ends
            self.store.open_units.add(self)
        async with self.using:
            self.idle = time.monotonic() - self.last
            try:
                if opening or savepoints:  # one trip: BEGIN, at the level pinned here, and the savepoints asked for
                    await self.db.execute("; ".join([*opening, *(f"SAVEPOINT {name}" for name in savepoints)]))
                return await statement(self.db)
            finally:
                self.last = time.monotonic()

    async def keep_awake(self) -> None:
        """While its process renews claims, a unit of work whose tool works between statements (longer than the
        lease, perhaps) is never ended by the server as idle: one that sat a quarter lease sends an empty query."""
        if self.db is None or self.using.locked() or time.monotonic() - self.last < self.store.limits.lease / 4:
            return
        async with self.using:
            if self.db is not None:
                with contextlib.suppress(*STORE_FAILURES):  # its own next statement meets the failure, and says so
                    await self.db.execute("SELECT 1")
                self.last = time.monotonic()

    async def execute(self, sql: str, *args: object) -> int:
        status: str = await self.run(lambda db: db.execute(sql, *args))
        words = status.split()  # "UPDATE 2", "INSERT 0 1", "CREATE TABLE"
        return int(words[-1]) if words[0] in ("INSERT", "UPDATE", "DELETE") else 0

    async def fetchall(self, sql: str, *args: object) -> list[Row]:
        return [tuple(record) for record in await self.run(lambda db: db.fetch(sql, *args))]

    async def fetchone(self, sql: str, *args: object) -> Row | None:
        record = await self.run(lambda db: db.fetchrow(sql, *args))
        return None if record is None else tuple(record)

    async def lock(self, name: str) -> None:
        await self.run(lambda db: db.execute(LOCK, name))

    async def finish(self, completion: Completion | None) -> bool:
        if completion is None:
            await self.let_go("COMMIT")
            return False
        key, fingerprint, outcome = completion
        retention = self.store.limits.retention
        if not self.begun:  # no statement of the tool's: the completion alone, in a transaction of its own
            async with self.store.connection() as db:
                status = await db.execute(COMPLETE, key, fingerprint, outcome, retention)
            return bool(status == "UPDATE 1")
        completion_sent = COMPLETION.format(
            key=literal(key),
            fingerprint=f"decode('{fingerprint.hex()}', 'hex')",
            outcome=literal(outcome),
            retention=float(retention),
        )
        ending = COMPLETE_AND_COMMIT.format(completion=completion_sent)
        try:
            await self.send(False, [], lambda db: db.execute(ending))
        except asyncpg.DivisionByZeroError:  # fenced off: the COMMIT never ran
            await self.let_go("ROLLBACK")
            return False
        except BaseException:
            await self.let_go("ROLLBACK")
            raise
        await self.let_go(None)
        return True

    async def abandon(self) -> None:
        await self.let_go("ROLLBACK")

    async def let_go(self, statement: str | None) -> None:
        """COMMIT or ROLLBACK (None: the unit of work has ended already); whatever happens, the connection goes
        back to the pool."""
        if self.db is None:
            return
        db, self.db, self.begun = self.db, None, False
        self.store.open_units.discard(self)
        try:
            if statement is not None:
                await db.execute(statement)
        finally:
            await self.store.pool.release(db)

    def store_failure(self, error: Exception) -> StoreUnavailable | None:
        if not is_store_failure(error):
            return None
        longest = idle_timeout(self.store.limits)
        if isinstance(error, asyncpg.IdleInTransactionSessionTimeoutError) or self.idle >= longest:
            return StoreUnavailable(SAT_IDLE.format(seconds=longest, error=error))
        return failed(error)
