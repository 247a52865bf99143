"""A client's retry policy for SEP-3182: one idempotencyKey per logical tools/call, retried until answered.

Copy this file into a client on the mcp 2.x SDK; it needs nothing else. It works for
any tool, since it never reads the tool's schema: the key travels beside `arguments`
(W1), not inside them.

    result = await call_tool(session, "send_email", {"to": "ada@example.com", ...})

In order, as the rows of tests/CONFORMANCE.md and the positions P1-P22 of this
project name them (our ids, not the SEP's):

1. mint one key for the logical call, before the first attempt: a random UUID (W5);
2. send tools/call with the key in params, beside `arguments` (W1); the 2.x SDK's
   own params model would drop it, so KeyedCallParams declares it;
3. a timeout or a lost connection leaves the outcome unknown: send the very same
   request again, same key, same arguments, after a back-off;
4. in progress or store full (`error.data.type`, P5) mean "come back later": back off, retry;
5. a conflict or an invalid key is final: retrying the same request cannot succeed;
6. anything else is the call's answer: a result (`isError` included) or any other
   JSON-RPC error, returned or raised as it came.

The loop is bounded: after `attempts` tries it raises GaveUp, which carries the key.
A caller that resumes the logical call later (after GaveUp, after a restart that
kept the key, or after finishing a URL elicitation, -32042, P6') passes it back.
A server without `capabilities.tools.idempotency` gives no guarantee (C4): check
it first (C3), and do not retry a non-idempotent tool on such a server.
"""

import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

log = logging.getLogger("retry")

# How the 2.x SDK's client reports an attempt whose outcome it cannot know.
TIMED_OUT = mcp_types.REQUEST_TIMEOUT  # it stopped waiting (and, on stdio, sent notifications/cancelled)
CONNECTION_LOST = mcp_types.CONNECTION_CLOSED  # the transport went away with the request outstanding
UNKNOWN_OUTCOME = {TIMED_OUT, CONNECTION_LOST}

# P5: the error.data.type values a client branches on. The code alone (-32602 for all
# of them) does not say which is worth retrying.
COME_BACK_LATER = {"idempotency_key_in_progress", "idempotency_store_full", "idempotency_store_unavailable"}
FINAL = {"idempotency_key_conflict", "invalid_idempotency_key"}


class KeyedCallParams(mcp_types.CallToolRequestParams):
    """tools/call params with the key beside `arguments`: 2.x's own model would drop it."""

    idempotency_key: str | None = None  # the SDK's camelCase aliases put it on the wire as idempotencyKey


class KeyedCall(mcp_types.CallToolRequest):
    """A tools/call request that carries KeyedCallParams."""

    params: KeyedCallParams


@dataclass(frozen=True)
class Policy:
    """How long one attempt may take, how many attempts, and how the waits between them grow."""

    timeout: float = 30.0  # seconds per attempt; a tool slower than this is retried, and the server says in progress
    attempts: int = 8
    first_back_off: float = 0.25  # seconds, doubled after each wait that follows a retryable answer
    max_back_off: float = 8.0


class KeyRefused(Exception):
    """The server refused the key for good: a conflict (the key was used with other arguments) or an invalid key."""

    def __init__(self, error: MCPError):
        super().__init__(f"{error.data['type']}: {error.message}")
        self.error = error


class GaveUp(Exception):
    """Every attempt ended without an answer; `key` resumes the same logical call later."""

    def __init__(self, key: str, attempts: int, last: MCPError):
        super().__init__(f"no answer after {attempts} attempts (last: {last.message}); key {key}")
        self.key, self.last = key, last


Connection = ClientSession | Callable[[], Awaitable[ClientSession]]


def new_key() -> str:
    """A fresh idempotencyKey: a random UUID, so two logical calls never share one by chance (W5)."""
    return str(uuid.uuid4())


def rejection_type(error: MCPError) -> str | None:
    """P5: what a client branches on, error.data.type; None when the error is not an idempotency rejection."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def retryable(error: MCPError) -> bool:
    """May the very same request be sent again? Yes if its outcome is unknown, or the server asked for later."""
    return error.code in UNKNOWN_OUTCOME or rejection_type(error) in COME_BACK_LATER


async def session_for_attempt(connection: Connection) -> ClientSession:
    """The session to send on: the one given, or the caller's reconnect function's, which replaces a lost one."""
    return await connection() if callable(connection) else connection


async def attempt(connection: Connection, request: KeyedCall, timeout: float) -> mcp_types.CallToolResult:
    """Send the request once and wait at most `timeout` seconds for its answer."""
    session = await session_for_attempt(connection)
    return await session.send_request(request, mcp_types.CallToolResult, request_read_timeout_seconds=timeout)


def jittered(back_off: float) -> float:
    """A wait between half of `back_off` and all of it, so clients that failed together do not retry together."""
    return random.uniform(back_off / 2, back_off)


async def call_tool(connection: Connection, name: str, arguments: dict, *, key: str | None = None,
                    policy: Policy = Policy()) -> mcp_types.CallToolResult:
    """One logical tools/call: sent with one key until answered, refused, or out of attempts.

    `connection` is a ClientSession, or an async function that returns the session to
    send each attempt on (a client that reconnects after a lost connection passes one).
    """
    key = new_key() if key is None else key  # once, outside the loop: every attempt is the same request
    request = KeyedCall(params=KeyedCallParams(name=name, arguments=arguments, idempotency_key=key))
    back_off = policy.first_back_off
    for number in range(1, policy.attempts + 1):
        try:
            return await attempt(connection, request, policy.timeout)
        except MCPError as error:
            if rejection_type(error) in FINAL:
                log.info("attempt %d: %s: final, not retried", number, rejection_type(error))
                raise KeyRefused(error) from None
            if not retryable(error):
                raise  # the call's own answer: a recorded JSON-RPC error, an unknown tool, ...
            last = error
        if number == policy.attempts:
            break
        wait = jittered(back_off)
        log.info("attempt %d: %s; retrying the same request in %.2fs",
                 number, rejection_type(last) or last.message, wait)
        await anyio.sleep(wait)
        back_off = min(back_off * 2, policy.max_back_off)
    log.info("attempt %d: %s; giving up", policy.attempts, rejection_type(last) or last.message)
    raise GaveUp(key, policy.attempts, last)
