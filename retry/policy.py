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
4. an idempotency rejection says whether to send it again: `error.data.retryable` where
   the server sets it, else its `error.data.type` (P5): in progress, store full
   and store unavailable mean "come back later": back off, retry;
5. a conflict or an invalid key (`retryable: false`) is final: the same request cannot succeed;
6. anything else is the call's answer: a result (`isError` included) or any other
   JSON-RPC error, returned or raised as it came.

The server's settings (`capabilities.tools.idempotency` = `{"maxKeyLength": N,
"retentionSeconds": R}`, read by `discover_settings`) bound the loop further: a key is
never longer than N (one minted fits; a caller's longer one is refused before anything is
sent), and no attempt is made R seconds or more after the first, when the server may have
forgotten the key and would run the call again (WindowPassed).

The loop is bounded: after `attempts` tries it raises GaveUp, which carries the key.
A caller that resumes the logical call later (after GaveUp, after a restart that
kept the key, or after finishing a URL elicitation, -32042, P6') passes it back.
A server without `capabilities.tools.idempotency` gives no guarantee (C4): check
it first (C3), and do not retry a non-idempotent tool on such a server.
"""

import logging
import random
import secrets
import string
import time
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
        self.first_sent: float | None = None  # time.time() of the key's first attempt, for a caller that resumes

    def with_first_sent(self, first_sent: float) -> "GaveUp":
        self.first_sent = first_sent
        return self


Connection = ClientSession | Callable[[], Awaitable[ClientSession]]


class WindowPassed(GaveUp):
    """The server's retention window (retentionSeconds) has passed since the first attempt: it may have
    forgotten the key, so sending it again could run the call a second time. Nothing more is sent."""

    def __init__(self, key: str, attempts: int, last: MCPError, window: float):
        super().__init__(key, attempts, last)
        self.args = (
            f"the server keeps a key {window:g} s and the first attempt was sent longer ago: another would "
            f"not be a retry but maybe a second call (after {attempts} attempts, last: {last.message}); "
            f"key {key}",
        )


class KeyTooLong(ValueError):
    """A caller's key longer than the server's maxKeyLength: refused here, before anything is sent."""


@dataclass(frozen=True)
class Settings:
    """The limits a server declares in capabilities.tools.idempotency; None where it declares none."""

    max_key_length: int | None = None
    retention_seconds: float | None = None

    @classmethod
    def from_capability(cls, capability: object) -> "Settings | None":
        """The settings of a capability as it came off the wire; None when there is no capability (C3, C4)."""
        if not isinstance(capability, dict):
            return None

        def positive(name: str) -> int | None:  # anything else is no setting a client can rely on
            value = capability.get(name)
            return value if type(value) is int and value > 0 else None

        return cls(positive("maxKeyLength"), positive("retentionSeconds"))


async def discover_settings(
    session: ClientSession, version: str = mcp_types.LATEST_PROTOCOL_VERSION
) -> Settings | None:
    """C3: ask server/discover for capabilities.tools.idempotency, as it came off the wire (the SDK's typed
    capabilities drop it); None when the server declares none, or has no server/discover."""
    try:
        discovered = await session.send_discover(version)
    except MCPError:  # a 2025 server: no server/discover, so nothing this client may rely on
        return None
    return Settings.from_capability(discovered.get("capabilities", {}).get("tools", {}).get("idempotency"))


KEY_ALPHABET = string.ascii_letters + string.digits + "-_"  # 6 bits a character


def new_key(max_length: int | None = None) -> str:
    """A fresh idempotencyKey: a random UUID, so two logical calls never share one by chance (W5); where the
    server takes fewer than its 36 characters, as many random characters as it takes."""
    key = str(uuid.uuid4())
    if max_length is None or len(key) <= max_length:
        return key
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(max_length))


def rejection_type(error: MCPError) -> str | None:
    """P5: what a client branches on, error.data.type; None when the error is not an idempotency rejection."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def said_retryable(error: MCPError) -> bool | None:
    """An idempotency rejection's own word, error.data.retryable; None where the server gives none."""
    if rejection_type(error) is None:
        return None
    value = error.data.get("retryable")
    return value if isinstance(value, bool) else None


def final(error: MCPError) -> bool:
    """Is it a refusal of this request for good? data.retryable false where given, else a FINAL type."""
    said = said_retryable(error)
    return said is False or (said is None and rejection_type(error) in FINAL)


def retryable(error: MCPError) -> bool:
    """May the very same request be sent again? Yes if its outcome is unknown, or the server asked for later
    (data.retryable true where given, else a COME_BACK_LATER type)."""
    said = said_retryable(error)
    return error.code in UNKNOWN_OUTCOME or said is True or (said is None and rejection_type(error) in COME_BACK_LATER)


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


async def call_tool(
    connection: Connection,
    name: str,
    arguments: dict,
    *,
    key: str | None = None,
    policy: Policy = Policy(),
    settings: Settings | None = None,
    first_sent: float | None = None,
) -> mcp_types.CallToolResult:
    """One logical tools/call: sent with one key until answered, refused, or out of attempts.

    `connection` is a ClientSession, or an async function that returns the session to
    send each attempt on (a client that reconnects after a lost connection passes one).
    `settings` are the server's (discover_settings); a caller resuming a key passes back
    `first_sent`, the time.time() of its first attempt (GaveUp carries it), so the window
    is counted from there.
    """
    settings = settings or Settings()
    if key is None:
        key = new_key(settings.max_key_length)  # once, outside the loop: every attempt is the same request
    elif settings.max_key_length is not None and len(key) > settings.max_key_length:
        raise KeyTooLong(
            f"the key has {len(key)} characters; the server takes at most {settings.max_key_length} "
            "(capabilities.tools.idempotency.maxKeyLength): nothing was sent"
        )
    request = KeyedCall(params=KeyedCallParams(name=name, arguments=arguments, idempotency_key=key))
    first_sent = time.time() if first_sent is None else first_sent
    back_off = policy.first_back_off
    for number in range(1, policy.attempts + 1):
        try:
            return await attempt(connection, request, policy.timeout)
        except MCPError as error:
            if final(error):
                log.info("attempt %d: %s: final, not retried", number, rejection_type(error))
                raise KeyRefused(error) from None
            if not retryable(error):
                raise  # the call's own answer: a recorded JSON-RPC error, an unknown tool, ...
            last = error
        if number == policy.attempts:
            break
        wait = jittered(back_off)
        log.info(
            "attempt %d: %s; retrying the same request in %.2fs", number, rejection_type(last) or last.message, wait
        )
        window = settings.retention_seconds
        if window is not None and time.time() + wait - first_sent >= window:
            # The key may be forgotten by the time this attempt lands: it would be a new call, not a retry.
            log.info(
                "attempt %d: %s; the server's %gs window has passed: giving up",
                number,
                rejection_type(last) or last.message,
                window,
            )
            raise WindowPassed(key, number, last, window).with_first_sent(first_sent)
        await anyio.sleep(wait)
        back_off = min(back_off * 2, policy.max_back_off)
    log.info("attempt %d: %s; giving up", policy.attempts, rejection_type(last) or last.message)
    raise GaveUp(key, policy.attempts, last).with_first_sent(first_sent)
