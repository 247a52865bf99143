"""The tasks extension of 2026-07-28 (SEP-2663), server side, for the demo's charges: P24.

The mcp 2.3.0 SDK has no Tasks, so this module builds them on its public hooks, an
Extension inside the idempotency layer and a server middleware outside it
(ledger_server.py sets the order):

    extensions=[keys, tasks], middleware=[tasks.gate, keys.advertise]

`tasks` (an Extension, the interceptor after the layer's) answers a declaring
`tools/call` of a task tool with a `CreateTaskResult` and runs the tool afterwards; the
SDK advertises it under `capabilities.extensions`. `tasks.gate` (outside the layer)
serves `tasks/get`, `tasks/update` and `tasks/cancel`, and holds the MUST NOT that a
replay could break: no task to a request that did not declare the extension. Read it in
the order of SEP-2663: who declared it, task creation (durable before it is answered),
the work, then the task methods and their gates.

Tasks live in the store the records and the ledger live in (a table of this demo's,
written through the layer's unit of work as mcp_idempotency_demo/ledger.py does), so every instance
on that store answers for every task. A task whose instance stops mid-charge stays `working` (its
charge rolled back): nothing here resumes it.

P29: a task lives `ttlMs` from its creation, then it is gone (an unknown task, and purged): the
key's window and one lease more. The CreateTaskResult recorded under a key is committed within a
lease of the task's creation and replayed for one window from then, so no replay ever hands out
a task that no longer exists.
"""

import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import anyio
import mcp_types
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_idempotency.layer import Idempotency, as_mapping
from mcp_idempotency.rules import INTERNAL_ERROR

log = logging.getLogger("idempotency")

EXTENSION = "io.modelcontextprotocol/tasks"
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
POLL_INTERVAL_MS = 100  # the demo's charges take a fraction of a second

# ----------------------------------------------------------------------------
# The task table, the same SQL on every store
# ----------------------------------------------------------------------------

# `owner` is the principal (SEP-2663: authorisation on each task request; K2 for
# records): another principal's task id is an unknown task. `outcome` is the wire
# result of the tool, {"result": ...} or {"error": ...}, once the task has finished.
# For the store to make as it opens (open_store's `tables`), beside the ledger's.
# `expires_at` (seconds since the epoch) is its creation and its time to live (P29).
TABLES = (
    """CREATE TABLE IF NOT EXISTS tasks (
        task_id     text PRIMARY KEY,
        owner       text NOT NULL,
        status      text NOT NULL,
        created_at  text NOT NULL,
        updated_at  text NOT NULL,
        outcome     text,
        expires_at  double precision NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS tasks_expiry ON tasks (expires_at)",
)
INSERT = "INSERT INTO tasks VALUES ($1, $2, 'working', $3, $4, NULL, $5)"
PURGE = "DELETE FROM tasks WHERE expires_at <= $1"
STATUS = "SELECT status FROM tasks WHERE task_id = $1"
READ = """SELECT status, created_at, updated_at, outcome FROM tasks
    WHERE task_id = $1 AND owner = $2 AND expires_at > $3"""
# A task leaves `working` once: the first of its finish and a cancel wins.
FINISH = "UPDATE tasks SET status = $1, updated_at = $2, outcome = $3 WHERE task_id = $4 AND status = 'working'"
CANCEL = """UPDATE tasks SET status = 'cancelled', updated_at = $1
    WHERE task_id = $2 AND owner = $3 AND status = 'working' AND expires_at > $4"""


def now() -> str:
    """ISO 8601, UTC, as SEP-2663's timestamps are written."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ----------------------------------------------------------------------------
# Who declared the extension, and what a task looks like on the wire
# ----------------------------------------------------------------------------


def declares_tasks(ctx: Any) -> bool:
    """SEP-2663: did this request declare the extension in its own per-request capabilities (2026-07-28 only)?"""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False  # SEP-2663: not defined under the 2025 handshake, whatever the request says
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    capabilities = meta.get(mcp_types.CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION), Mapping)


def missing_declaration() -> MCPError:
    """SEP-2663's -32021, naming the extension the request must declare."""
    return MCPError(
        code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message="Missing required client capability",
        data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def unknown_task(task_id: object) -> MCPError:
    """SEP-2663's -32602 for a task id this server does not hold for this principal."""
    return MCPError(code=mcp_types.INVALID_PARAMS, message=f"Failed to retrieve task: Task not found: {task_id!r}")


def is_task(result: Any) -> bool:
    """Is this answer a CreateTaskResult? (resultType "task" is reserved for it.)"""
    return isinstance(result, Mapping) and result.get("resultType") == "task"


@dataclass
class Job:
    """A task's work: the rest of the SDK's chain for the call, run once the task exists."""

    task_id: str
    ctx: Any
    call_next: CallNext


class Cancelled(Exception):
    """A task cancelled while its work ran: its unit of work rolls back, the charge with it."""

    def __init__(self, task_id: str):
        super().__init__(f"task {task_id} was cancelled before it finished")


# ----------------------------------------------------------------------------
# The extension
# ----------------------------------------------------------------------------


class Tasks(Extension):
    """SEP-2663 for the demo's ledger server: `tasks.gate` outside the idempotency layer, `tasks` inside it."""

    identifier = EXTENSION

    def __init__(self, keys: Idempotency, task_tools: Collection[str], server_info: Mapping[str, str]):
        self.keys, self.task_tools, self.server_info = keys, frozenset(task_tools), dict(server_info)
        self._jobs: MemoryObjectSendStream[Job] | None = None
        # P29: longer than a replay of its CreateTaskResult can come (a window from its record's
        # commit, within a lease of the creation), so no replayed handle outlives its task.
        self.ttl = keys.limits.retention + keys.limits.lease

    def stamped(self, result: dict[str, Any]) -> dict[str, Any]:
        """A 2026-07-28 result as the SDK's own handlers answer: the server's info in _meta."""
        return {**result, "_meta": {mcp_types.SERVER_INFO_META_KEY: self.server_info}}

    # -- the work, outside any request ---------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the server runs: a worker that starts each task's work; on exit, the work in hand finishes."""
        send, receive = anyio.create_memory_object_stream[Job](math.inf)
        async with anyio.create_task_group() as work:
            work.start_soon(self.start_each, receive, work)
            self._jobs = send
            try:
                yield
            finally:
                self._jobs = None
                send.close()

    async def start_each(self, jobs: MemoryObjectReceiveStream[Job], work: TaskGroup) -> None:
        """Start each job from here, not from the request: a task started there would inherit the
        request's open unit of work (the layer's, under a key) and write into a finished transaction."""
        async with jobs:
            async for job in jobs:
                work.start_soon(self.work, job)

    async def work(self, job: Job) -> None:
        """Run the tool once its task exists, and finish the task with the charge in one unit of work."""
        async with self.keys.transaction() as tx:
            # SEP-2663: the task was answered only once durably created; the work starts
            # only then too. If its creation rolled back (with the key's record), none runs.
            await tx.lock(job.task_id)  # the task's own lock: its creation's transaction (maybe the layer's) ends first
            exists = await tx.fetchone(STATUS, job.task_id)
        if exists is None or exists[0] != "working":
            log.info("task %s: not run (%s)", job.task_id, "never created" if exists is None else exists[0])
            return
        try:
            await self.run_and_finish(job)
        except Cancelled:
            log.info("task %s: cancelled, its charge rolled back", job.task_id)
        except Exception:
            log.exception("task %s failed", job.task_id)
            async with self.keys.transaction() as tx:
                outcome = json.dumps({"error": INTERNAL_ERROR})
                await tx.execute(FINISH, "failed", now(), outcome, job.task_id)

    async def run_and_finish(self, job: Job) -> None:
        """P17 for a task: the tool's charge and the task's completion commit together, or neither."""
        async with self.keys.transaction() as tx:
            try:
                outcome: dict[str, Any] = {"result": as_mapping(await job.call_next(job.ctx))}
                status = "completed"  # SEP-2663: a result with isError too
            except MCPError as error:
                outcome, status = {"error": error.error.model_dump(exclude_none=True)}, "failed"
            if not await tx.execute(FINISH, status, now(), json.dumps(outcome), job.task_id):
                # Cancelled meanwhile (on any instance): the cancel won, so the charge is undone.
                raise Cancelled(job.task_id)
        log.info("task %s: %s", job.task_id, status)

    # -- the interceptor inside the layer ------------------------------------

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Inside the idempotency layer: a declaring call of a task tool gets a task (SEP-2663: the server decides)."""
        if declares_tasks(ctx) and params.name in self.task_tools:
            return await self.create(ctx, call_next)
        return await call_next(ctx)

    async def create(self, ctx: Any, call_next: CallNext) -> dict[str, Any]:
        """SEP-2663 task creation: the task durably in the store before its CreateTaskResult is answered."""
        if self._jobs is None:
            raise RuntimeError("tasks are not running: enter tasks.running() in the server's lifespan")
        task_id, created = str(uuid.uuid4()), now()  # server-minted, unguessable (SEP-2663 security)
        # Under a key this joins the layer's unit of work: the task and the key's record
        # (this CreateTaskResult) commit together, before the layer answers; unkeyed, it
        # commits here. Either way the answer leaves only once tasks/get would find it.
        async with self.keys.transaction() as tx:
            await tx.lock(task_id)  # held to the end of the transaction: the work waits for it
            await tx.execute(PURGE, time.time())  # P29: the tasks whose time to live has passed are gone
            await tx.execute(INSERT, task_id, self.owner(), created, created, time.time() + self.ttl)
        self._jobs.send_nowait(Job(task_id, ctx, call_next))
        log.info("task %s: created for %s", task_id, ctx.params["name"])
        return {  # the SDK stamps the server's info on it, as on any handler's result
            "resultType": "task",
            "taskId": task_id,
            "status": "working",
            "createdAt": created,
            "lastUpdatedAt": created,
            "ttlMs": self.ttl_ms(),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def ttl_ms(self) -> int:
        """SEP-2663's ttlMs: how long a task is kept from its creation, in whole milliseconds (P29)."""
        return int(self.ttl * 1000)

    def owner(self) -> str:
        """The principal a task belongs to, as the layer finds it (K2): one tenant, or the token's (issuer, subject)."""
        return json.dumps(self.keys.principal())

    # -- tasks/get, tasks/update, tasks/cancel -------------------------------

    async def task_method(self, ctx: Any) -> dict[str, Any]:
        """SEP-2663's gates, in order: the declaration (-32021), a task id, its Mcp-Name, a task of this principal."""
        if not declares_tasks(ctx):
            raise missing_declaration()
        task_id = ctx.params.get("taskId")
        if not isinstance(task_id, str):
            raise MCPError(code=mcp_types.INVALID_PARAMS, message="params.taskId must be a string")
        self.check_routing_header(ctx, task_id)
        if ctx.method == "tasks/get":
            return await self.get(task_id)
        if ctx.method == "tasks/cancel":
            return await self.cancel(task_id)
        await self.get(task_id)  # tasks/update: no task of these asks for input, so every response is ignored
        return self.stamped({"resultType": "complete"})

    def check_routing_header(self, ctx: Any, task_id: str) -> None:
        """SEP-2663 over Streamable HTTP: Mcp-Name carries the task id; a mismatch is SEP-2243's -32020."""
        request = ctx.request
        if request is None:
            return  # stdio carries no headers
        if decode_header_value(request.headers.get(MCP_NAME_HEADER)) != task_id:
            raise MCPError(code=mcp_types.HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")

    async def get(self, task_id: str) -> dict[str, Any]:
        """tasks/get: a pure read, the task's state, with its result or error once it has finished."""
        async with self.keys.transaction() as tx:
            row = await tx.fetchone(READ, task_id, self.owner(), time.time())
        if row is None:
            raise unknown_task(task_id)
        status, created, updated, outcome = row
        task = {
            "resultType": "complete",  # SEP-2663: tasks/get's own result shape
            "taskId": task_id,
            "status": status,
            "createdAt": created,
            "lastUpdatedAt": updated,
            "ttlMs": self.ttl_ms(),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        return self.stamped({**task, **(json.loads(outcome) if outcome else {})})

    async def cancel(self, task_id: str) -> dict[str, Any]:
        """tasks/cancel: acknowledged; a working task becomes cancelled, and its charge, if under way, rolls back.
        A finished task stays as it finished: the first of its finish and a cancel wins."""
        async with self.keys.transaction() as tx:
            cancelled = await tx.execute(CANCEL, now(), task_id, self.owner(), time.time())
            if not cancelled and await tx.fetchone(READ, task_id, self.owner(), time.time()) is None:
                raise unknown_task(task_id)
        log.info("task %s: cancel %s", task_id, "took effect" if cancelled else "acknowledged, it had finished")
        return self.stamped({"resultType": "complete"})

    # -- the middleware outside the layer --------------------------------------

    async def gate(self, ctx: Any, call_next: CallNext) -> Any:
        """Outside the idempotency layer: serve the task methods, and keep the MUST NOT on every answer."""
        if ctx.request_id is not None and ctx.method in TASK_METHODS:
            return await self.task_method(ctx)
        result = await call_next(ctx)
        if ctx.method == "tools/call" and is_task(result) and not declares_tasks(ctx):
            # P24: the layer replays a key's recorded CreateTaskResult to a retry whose
            # fingerprint matches, and the fingerprint ignores _meta (E1), where the
            # declaration lives. SEP-2663: never a task to a request that did not declare
            # it, and -32021 when the server cannot answer it otherwise: the record stays.
            # The layer refuses such a replay itself (P30); this holds for a handle it
            # recorded before it kept what the request declared.
            log.info("task handle withheld: the retry did not declare %s", EXTENSION)
            raise missing_declaration()
        return result
