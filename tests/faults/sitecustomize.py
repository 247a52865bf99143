"""Fault injection for the tests: kill a server at an exact point of a keyed call, hold it there, or skew its clock.

tests/test_crashes.py, tests/test_clocks.py and one test of tests/test_several_instances.py
start real server processes with this folder first on PYTHONPATH. Python imports
`sitecustomize` at start-up, before the server's own code, so this module runs in
those processes and in no other: the test process, and every server the other
tests start, never see it. It does nothing unless one of its variables is set:

    SEP3182_KILL_AT=PHASE         SIGKILL the process at PHASE of its first keyed call
                                  that reaches it (the process dies there, so there is
                                  no second one); it writes `faults: SIGKILL at PHASE`
                                  to stderr first, so a test can tell its kill from a crash
    SEP3182_STOP_AT=PHASE         SIGSTOP the process at PHASE of its first keyed call
                                  that reaches it: frozen, as a paused VM, until the test
                                  sends SIGCONT; it writes `faults: SIGSTOP at PHASE` first
    SEP3182_PAUSE_AT=PHASE        instead hold every keyed call at PHASE for
    SEP3182_PAUSE_SECONDS=S       S seconds (default 3), writing `faults: paused at PHASE`:
                                  a slow call, caught in the middle of its unit of work
    SEP3182_FILE_SIZE_LIMIT=BYTES no file this process writes may grow past BYTES (RLIMIT_FSIZE,
                                  SIGXFSZ ignored): a write past it fails as on a full
                                  disk (EFBIG, which SQLite reports as "database or disk is
                                  full"); it writes `faults: files capped at BYTES bytes`
    SEP3182_CLOCK_OFFSET=SECONDS  shift this process's wall clock (time.time, time.time_ns)
                                  by SECONDS, as a machine whose clock is wrong; it writes
                                  `faults: wall clock shifted by SECONDS s` to stderr

The phases of a keyed tools/call, and what is wrapped to reach each one (to kill
there, or to hold the call there):

    before-claim-commit  the claim's INSERT is done, its COMMIT is not.
                         SQLite: `store.sqlite.connect` returns a proxy connection; the
                         cursor of `store.sqlite.CLAIM` notes a returned owner, and the
                         next `execute("COMMIT")` kills instead of committing.
                         PostgreSQL runs a claim as one statement in a transaction of its
                         own (`store.postgres.CLAIM`), so no client can die between its
                         INSERT and its COMMIT: `asyncpg.Connection.fetchrow` kills just
                         before that statement is sent, the nearest a client comes (the
                         pool's connection proxies look the method up on the class).
    after-claim          the claim committed, the tool has not started:
                         `SQLiteStore.claim` / `PostgresStore.claim` kill after returning Won.
    after-charge         inside the tool, after its ledger write, before the unit of work
                         commits: the demo's `ledger.charge` (mcp_idempotency_demo.ledger,
                         which runs its UPDATE through the transaction's `run`) kills
                         after it returned, on either store.
    after-tool           any tool, once it returned, before the unit of work commits: the
                         layer's `outcome_of` (mcp_idempotency.layer) kills after it returned;
                         an e-mail sent, its record not yet completed (P27).
    after-commit         the charge and the completed record are committed, the reply is
                         not sent: the transaction's `commit` kills once it completed the record.

The server code holds no fault code: everything here wraps the store's own functions
from outside. The server imports its store package (`mcp_idempotency.stores`), which
imports its backend module (`mcp_idempotency.stores.sqlite`, `...postgres`) only when
it opens one, and its ledger module (`mcp_idempotency_demo.ledger`), so none exists yet
when this module runs. A finder put first on `sys.meta_path` waits for those imports
(and asyncpg's): it lets the normal finders locate
the module, wraps the loader they return, and applies the patches as soon as the module's
own code has run, before any importer gets it back. Nothing else is touched: the SDK,
the server module and the store's SQL are the ones the other tests run.

The clock offset replaces `time.time` at start-up, before the store is imported, so
`SQLiteStore`'s default clock (`clock=time.time`, bound when the class is defined) is the
skewed one too: that is the clock SQLite's leases and retention are measured on. The
PostgreSQL store never reads it (P19), which is what the clock tests show.
"""

import importlib.abc
import os
import signal
import sys
import time

KILL_AT = os.environ.get("SEP3182_KILL_AT")
STOP_AT = os.environ.get("SEP3182_STOP_AT")
PAUSE_AT = os.environ.get("SEP3182_PAUSE_AT")
PAUSE_SECONDS = float(os.environ.get("SEP3182_PAUSE_SECONDS", "3"))
CLOCK_OFFSET = os.environ.get("SEP3182_CLOCK_OFFSET")
FILE_SIZE_LIMIT = os.environ.get("SEP3182_FILE_SIZE_LIMIT")
PHASES = ("before-claim-commit", "after-claim", "after-charge", "after-tool", "after-commit")


def say(line: str) -> None:
    """One line on stderr, written at once (the process may die on the next line)."""
    os.write(2, f"faults: {line}\n".encode())


def kill(phase: str) -> None:
    """Die here, as a machine that loses power does: no cleanup, no reply, no rollback sent."""
    say(f"SIGKILL at {phase}")
    os.kill(os.getpid(), signal.SIGKILL)


def stop(phase: str) -> None:
    """Freeze here, every thread of the process, as a paused VM does: locks held, connections open."""
    global STOP_AT
    STOP_AT = None  # once: after SIGCONT the process carries on as a healthy one
    say(f"SIGSTOP at {phase}")
    os.kill(os.getpid(), signal.SIGSTOP)


def reached_in_thread(phase: str) -> None:
    """A keyed call reached `phase` in a worker thread (SQLite's statements run there)."""
    if phase == KILL_AT:
        kill(phase)
    if phase == STOP_AT:
        return stop(phase)
    if phase != PAUSE_AT:
        return
    say(f"paused at {phase}")
    time.sleep(PAUSE_SECONDS)


async def reached(phase: str) -> None:
    """A keyed call reached `phase` on the event loop: die, or hold it there."""
    if phase == KILL_AT:
        kill(phase)
    if phase == STOP_AT:
        return stop(phase)
    if phase != PAUSE_AT:
        return
    import anyio  # the server's own dependency, loaded by now

    say(f"paused at {phase}")
    await anyio.sleep(PAUSE_SECONDS)


# ----------------------------------------------------------------------------
# The phases: one set of wrappers each, applied to the store's backend module once it is imported
# ----------------------------------------------------------------------------


class ClaimWatchingCursor:
    """The cursor of a SQLite claim statement: a fetched row means the claim won."""

    def __init__(self, cursor, connection: "ClaimWatchingConnection"):
        self._cursor, self._connection = cursor, connection

    def fetchone(self):
        row = self._cursor.fetchone()
        if row is not None:
            self._connection.holds_claim = True
        return row

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class ClaimWatchingConnection:
    """A sqlite3 connection that stops at the COMMIT of a transaction holding a won claim."""

    def __init__(self, db, claim_statement: str):
        self._db, self._claim_statement = db, claim_statement
        self.holds_claim = False

    def execute(self, statement, *args):
        if statement in ("COMMIT", "ROLLBACK"):
            if statement == "COMMIT" and self.holds_claim and self._db.in_transaction:
                reached_in_thread("before-claim-commit")
            self.holds_claim = False
        cursor = self._db.execute(statement, *args)
        return ClaimWatchingCursor(cursor, self) if statement == self._claim_statement else cursor

    def __getattr__(self, name):
        return getattr(self._db, name)


def before_sqlite_claim_commits(sqlite) -> None:
    connect = sqlite.connect

    def connect_watching(path, *args, **options):
        return ClaimWatchingConnection(connect(path, *args, **options), sqlite.CLAIM)

    sqlite.connect = connect_watching  # SQLiteStore looks the name up in its module at each call


def reach_after(classes, name: str, phase: str, when=lambda obj, result: True) -> None:
    """Wrap each class's async method `name`: once it returns and `when(obj, result)` holds, `phase` is reached."""
    for cls in classes:
        method = getattr(cls, name)

        async def wrapped(self, *args, method=method):
            result = await method(self, *args)
            if when(self, result):
                await reached(phase)
            return result

        setattr(cls, name, wrapped)


def after_claim_wins(backend) -> None:
    reach_after(
        [backend.SQLiteStore if hasattr(backend, "SQLiteStore") else backend.PostgresStore],
        "claim",
        "after-claim",
        lambda _, claim: type(claim).__name__ == "Won",
    )


def transaction_of(backend):
    return backend.SQLiteTransaction if hasattr(backend, "SQLiteTransaction") else backend.PostgresTransaction


def after_charge(ledger) -> None:
    charge = ledger.charge

    async def charged(tx, amount):
        balance = await charge(tx, amount)
        await reached("after-charge")
        return balance

    ledger.charge = charged  # the server's tool looks the name up in the module at each call


def after_tool(layer) -> None:
    outcome_of = layer.outcome_of

    async def ran(ctx, call_next, key):
        outcome = await outcome_of(ctx, call_next, key)
        await reached("after-tool")
        return outcome

    layer.outcome_of = ran  # run_and_record looks the name up in the module at each call


def after_completing_commit(backend) -> None:
    reach_after([transaction_of(backend)], "end", "after-commit", lambda tx, _: tx.completed)


def before_postgres_claim_commits(asyncpg) -> None:
    fetchrow = asyncpg.Connection.fetchrow

    async def wrapped(self, query, *args, **options):
        postgres = sys.modules.get("mcp_idempotency.stores.postgres")
        if postgres is not None and query == postgres.CLAIM:
            await reached("before-claim-commit")
        return await fetchrow(self, query, *args, **options)

    asyncpg.Connection.fetchrow = wrapped


# What to wrap in each module of the server's store package (and its ledger), for each phase.
MODULE_PATCHES = {
    "before-claim-commit": {"mcp_idempotency.stores.sqlite": before_sqlite_claim_commits},
    "after-claim": {
        "mcp_idempotency.stores.sqlite": after_claim_wins,
        "mcp_idempotency.stores.postgres": after_claim_wins,
    },
    "after-charge": {"mcp_idempotency_demo.ledger": after_charge},
    "after-tool": {"mcp_idempotency.layer": after_tool},
    "after-commit": {
        "mcp_idempotency.stores.sqlite": after_completing_commit,
        "mcp_idempotency.stores.postgres": after_completing_commit,
    },
}


# ----------------------------------------------------------------------------
# Applying them: a finder that patches a module right after its own code ran
# ----------------------------------------------------------------------------


class PatchingLoader(importlib.abc.Loader):
    """The normal loader, then the patch, before the module is handed to its importer."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_code, ...: as the normal loader answers
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Find `name` as the other finders would, and patch it once it has run."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = PatchingLoader(spec.loader, patch)
                return spec
        return None


PHASE = KILL_AT or STOP_AT or PAUSE_AT
if PHASE is not None:
    if PHASE not in PHASES or sum(map(bool, (KILL_AT, STOP_AT, PAUSE_AT))) > 1:
        sys.exit(f"faults: set one of SEP3182_KILL_AT, SEP3182_STOP_AT, SEP3182_PAUSE_AT to one of {', '.join(PHASES)}")
    patches = dict(MODULE_PATCHES[PHASE])
    if PHASE == "before-claim-commit":
        patches["asyncpg"] = before_postgres_claim_commits
    sys.meta_path.insert(0, PatchOnImport(patches))

if CLOCK_OFFSET is not None:
    offset = float(CLOCK_OFFSET)
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_time_ns() + int(offset * 1_000_000_000)
    say(f"wall clock shifted by {offset:+g} s")

if FILE_SIZE_LIMIT is not None:
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails, rather than killing the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(FILE_SIZE_LIMIT), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    say(f"files capped at {FILE_SIZE_LIMIT} bytes")
