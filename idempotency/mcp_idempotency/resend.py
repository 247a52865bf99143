"""The client half's retry loop, on any SDK: one keyed request sent until it is answered, refused, or out of time.

It needs no MCP SDK, so `mcp_idempotency.client` (mcp 2.x) and the framework integrations in
`mcp_idempotency.integrations` (one of them on mcp 1.x) all run this one loop:

    call = lambda: session.call_tool(name, {**arguments, "idempotency_key": key})
    answer = await resend(timed(call, policy.timeout), reader, key, policy)

`send` sends the very same request each time: the caller fixes the key before the first
attempt. `reader` says, in the caller's SDK, which JSON-RPC error an exception carries and
which rejection a gateway turned into a tool result. In order:

1. an attempt is abandoned after `policy.timeout` seconds (by the SDK's read timeout, or
   `timed`); that, or a lost connection, leaves the outcome unknown: the request is sent again
   after a growing, jittered wait;
2. a rejection says whether to send it again: `error.data.retryable` where the server sets it,
   else its `error.data.type`: in progress, store full and store unavailable mean "come back
   later";
3. a conflict or an invalid key (`retryable: false`) is final: `KeyRefused`;
4. a rejection a gateway flattened into a tool result (`isError`, no acknowledgement, the text
   of one of the rejections' messages) is read as that rejection, never as the answer;
5. anything else is the call's answer, returned or raised as it came.

The server's settings bound the loop: the request is sent again for as long as the key may be
in progress (`deadlineSeconds` + `leaseSeconds` after the first attempt, this package's own
defaults where the server declares none), and never `retentionSeconds` or more after the first,
when the server may have forgotten the key (`WindowPassed`). Then `GaveUp`, which carries the
key and when it was first sent.
"""

import logging
import random
import secrets
import string
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import anyio

from .errors import IdempotencyError
from .rules import (
    ACKNOWLEDGEMENT,
    CONFLICT,
    DEADLINE_SECONDS,
    DEFAULT_PLACEMENT,
    ERROR_CODE,
    EXTENSION_ID,
    INVALID_KEY,
    MESSAGES,
    RETRYABLE,
    Placement,
)
from .stores import LEASE_SECONDS

__all__ = [
    "GaveUp",
    "KeyRefused",
    "Policy",
    "Reader",
    "Settings",
    "WindowPassed",
    "flattened",
    "new_key",
    "resend",
    "timed",
]

log = logging.getLogger("idempotency.client")

T = TypeVar("T")

# How both majors of the SDK report an attempt whose outcome they cannot know: the transport went away with the
# request outstanding (-32000), the read timed out (-32001; HTTP's 408 on mcp 1.x over HTTP).
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
UNKNOWN_OUTCOME = {CONNECTION_CLOSED, REQUEST_TIMEOUT, 408}
FINAL = {CONFLICT, INVALID_KEY}


@dataclass(frozen=True)
class Policy:
    """How long one attempt may take, how many attempts at most, and how the waits between them grow."""

    timeout: float = 30.0  # seconds per attempt; a tool slower than this is retried, and the server says in progress
    attempts: int | None = None  # None: as many as the server's settings leave time for
    first_back_off: float = 0.25  # seconds, doubled after each wait that follows a retryable answer
    max_back_off: float = 8.0


@dataclass(frozen=True)
class Settings:
    """What a server declares: where it reads the key, and its limits (None where it declares none)."""

    placement: Placement = DEFAULT_PLACEMENT
    max_key_length: int | None = None
    retention_seconds: float | None = None
    key_arguments: Mapping[str, str] = field(default_factory=dict)  # argument placement: tool -> marked property
    deadline_seconds: float | None = None  # how long a keyed run may take before the server ends it
    lease_seconds: float | None = None  # how long a holder that died keeps its key

    @classmethod
    def from_capabilities(cls, capabilities: object) -> "Settings | None":
        """The settings in capabilities as they came off the wire; None when neither placement is advertised."""
        if not isinstance(capabilities, dict):
            return None
        for placement, declared in (
            (Placement.PARAMS, (capabilities.get("tools") or {}).get("idempotency")),
            (Placement.META, (capabilities.get("extensions") or {}).get(EXTENSION_ID)),
        ):
            if isinstance(declared, dict):
                return cls(
                    placement,
                    positive(declared, "maxKeyLength"),
                    positive(declared, "retentionSeconds"),
                    deadline_seconds=positive(declared, "deadlineSeconds"),
                    lease_seconds=positive(declared, "leaseSeconds"),
                )
        return None

    def in_progress_at_most(self) -> float:
        """How long after a key's first attempt it may still be in progress: a live run is ended at its
        deadline, a dead holder's claim freed by its lease. Where the server declares neither, this
        package's own defaults, which a server built on it keeps unless told otherwise."""
        deadline = DEADLINE_SECONDS if self.deadline_seconds is None else self.deadline_seconds
        return deadline + (LEASE_SECONDS if self.lease_seconds is None else self.lease_seconds)


def positive(declared: dict[str, Any], name: str) -> int | None:
    """A setting a client can rely on: a whole number above zero; anything else is none."""
    value = declared.get(name)
    return value if type(value) is int and value > 0 else None


KEY_ALPHABET = string.ascii_letters + string.digits + "-_"  # 6 bits a character


def new_key(max_length: int | None = None) -> str:
    """A fresh idempotency key: a random UUID, so two logical calls never share one by chance; where the
    server takes fewer than its 36 characters, as many random characters as it takes."""
    key = str(uuid.uuid4())
    if max_length is None or len(key) <= max_length:
        return key
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(max_length))


# ----------------------------------------------------------------------------
# What an answer says
# ----------------------------------------------------------------------------


class ProtocolError(Protocol):
    """A JSON-RPC error as every SDK carries it (mcp 2.x's `MCPError`, mcp 1.x's `McpError.error`)."""

    @property
    def code(self) -> int: ...
    @property
    def message(self) -> str: ...
    @property
    def data(self) -> Any: ...


@dataclass(frozen=True)
class Rejection:
    """An error no SDK raised: an attempt that timed out here, or a rejection read from a flattened result."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class Reader(Generic[T]):
    """How one SDK shows a rejection: the JSON-RPC error an exception carries (None: the exception is the
    call's own), and the rejection a tool result stands for (None: the result is the answer)."""

    error: Callable[[BaseException], ProtocolError | None]
    rejection: Callable[[T], ProtocolError | None]


class KeyRefused(IdempotencyError):
    """Raised by call_tool (and the integrations) when the server refused the key for good: a conflict (the key
    was used with other arguments) or an invalid key; `error` is the server's rejection, and nothing is resent."""

    def __init__(self, error: ProtocolError):
        super().__init__(f"{rejection_type(error)}: {error.message}")
        self.error = error


class GaveUp(IdempotencyError):
    """Raised by call_tool (and the integrations) when every attempt ended without an answer; the outcome is
    unknown, and `key` and `first_sent` resume the same logical call later."""

    def __init__(self, key: str, attempts: int, last: ProtocolError, first_sent: float):
        super().__init__(f"no answer after {attempts} attempts (last: {last.message}); key {key}")
        self.key, self.attempts, self.last = key, attempts, last
        self.first_sent = first_sent  # time.time() of the first attempt


class WindowPassed(GaveUp):
    """Raised by call_tool (and the integrations) when the server's retention window has passed since the first
    attempt: it may have forgotten the key, so sending it again could run the call a second time. Nothing more
    is sent; the outcome is unknown."""

    def __init__(self, key: str, attempts: int, last: ProtocolError, first_sent: float, window: float):
        super().__init__(key, attempts, last, first_sent)
        self.args = (
            f"the server keeps a key {window:g} s and the first attempt was sent longer ago: another would "
            f"not be a retry but maybe a second call (after {attempts} attempts, last: {last.message}); "
            f"key {key}",
        )


def for_the_model(failed: KeyRefused | GaveUp) -> str:
    """What a model is told when its tool call ends without the tool's answer: what happened, never the key."""
    if isinstance(failed, KeyRefused):
        return f"The server refused this tool call ({failed.error.message}). It did not run it."
    return (
        f"The server did not answer this tool call after {failed.attempts} attempts, so whether it took effect "
        "is unknown. Check its effect before calling it again: a new call may do it twice."
    )


def rejection_type(error: ProtocolError) -> str | None:
    """What a client branches on, error.data.type; None when the error is not an idempotency rejection."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def said_retryable(error: ProtocolError) -> bool | None:
    """An idempotency rejection's own word, error.data.retryable; None where the server gives none."""
    value = error.data.get("retryable") if rejection_type(error) is not None else None
    return value if isinstance(value, bool) else None


def final(error: ProtocolError) -> bool:
    """Is it a refusal of this request for good? data.retryable false where given, else a final type."""
    said = said_retryable(error)
    return said is False or (said is None and rejection_type(error) in FINAL)


def retryable(error: ProtocolError) -> bool:
    """May the very same request be sent again? Yes if its outcome is unknown, or the server asked for later
    (data.retryable true where given, else a come-back-later type)."""
    said = said_retryable(error)
    return error.code in UNKNOWN_OUTCOME or said is True or (said is None and rejection_type(error) in RETRYABLE)


def acknowledged(meta: Mapping[str, Any] | None) -> bool:
    """Does a result's `_meta` say the server honoured the call's key? It does on the first answer and on every
    replay alike, so the answer itself tells, whatever a gateway did to the handshake."""
    said = (meta or {}).get(ACKNOWLEDGEMENT)
    return isinstance(said, dict) and isinstance(said.get("idempotencyKey"), str)


def text_of(content: Iterable[Any]) -> str:
    """A tool result's text parts, in any SDK's types, one a line."""
    return "\n".join(part.text for part in content if getattr(part, "type", None) == "text")


def flattened(is_error: bool | None, meta: Mapping[str, Any] | None, text: str) -> Rejection | None:
    """The rejection a gateway turned into a tool result, or None: an `isError` result that carries no
    acknowledgement and whose text holds one of the rejections' messages (as "Error calling tool 'x': ...")."""
    # A result the server recorded for the key carries the acknowledgement, even a tool's own error
    # that quotes a message: so only an answer the server never acknowledged is read as a rejection.
    if not is_error or acknowledged(meta):
        return None
    for kind, message in MESSAGES.items():
        if message in text:
            return Rejection(ERROR_CODE, text, {"type": kind})
    return None


# ----------------------------------------------------------------------------
# One logical call
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unanswered:
    """An attempt that brought no answer: the error that stands for it, final or worth sending again."""

    error: ProtocolError


def timed(send: Callable[[], Awaitable[T]], timeout: float) -> Callable[[], Awaitable[T]]:
    """`send`, abandoned after `timeout` seconds (opening its connection included): for an SDK call that
    takes no read timeout of its own, or one longer than the policy's."""

    async def within() -> T:
        """One attempt, or TimeoutError once `timeout` seconds have passed without its answer."""
        try:
            with anyio.fail_after(timeout):
                return await send()
        except TimeoutError:
            raise TimeoutError(f"timed out: no answer in {timeout:g}s") from None

    return within


async def attempted(send: Callable[[], Awaitable[T]], reader: Reader[T]) -> T | Unanswered:
    """One attempt: its answer, or the rejection or unknown outcome it stands for; an exception that is the
    call's own answer is raised as it came."""
    try:
        answer = await send()
    except TimeoutError as timed_out:  # `timed` gave up waiting: the outcome is unknown
        return Unanswered(Rejection(REQUEST_TIMEOUT, str(timed_out) or "timed out"))
    except Exception as raised:
        error = reader.error(raised)
        if error is None or not (final(error) or retryable(error)):
            raise  # the call's own answer: a recorded JSON-RPC error, an unknown tool, ...
        return Unanswered(error)
    rejected = reader.rejection(answer)
    return Unanswered(rejected) if rejected is not None and (final(rejected) or retryable(rejected)) else answer


def jittered(back_off: float) -> float:
    """A wait between half of `back_off` and all of it, so clients that failed together do not retry together."""
    return random.uniform(back_off / 2, back_off)


async def resend(
    send: Callable[[], Awaitable[T]],
    reader: Reader[T],
    key: str,
    policy: Policy = Policy(),
    settings: Settings = Settings(),
    first_sent: float | None = None,
    reopenable: bool = True,
) -> T:
    """`send`'s answer, the request carrying `key` sent again until there is one. `send` waits at most
    `policy.timeout` for its answer, by its SDK's read timeout or `timed`. `first_sent` is the time.time()
    of the first attempt where the call resumes; `reopenable` says a lost connection can be opened again."""
    first_sent = time.time() if first_sent is None else first_sent
    patience = settings.in_progress_at_most()
    back_off = policy.first_back_off
    number = 0
    while True:
        number += 1
        started = time.time()
        outcome = await attempted(send, reader)
        if not isinstance(outcome, Unanswered):
            return outcome
        last = outcome.error
        said = rejection_type(last) or last.message
        if final(last):
            log.info("attempt %d: %s: final, not retried", number, said)
            raise KeyRefused(last)
        lost_for_good = last.code == CONNECTION_CLOSED and not reopenable
        if done_trying(policy, number, started - first_sent >= patience) or lost_for_good:
            log.info("attempt %d: %s; giving up", number, said)
            raise GaveUp(key, number, last, first_sent)
        # The last wait ends as the key stops being in progress, so that one attempt lands after it.
        wait = min(jittered(back_off), max(0.0, first_sent + patience - time.time()))
        window = settings.retention_seconds
        if window is not None and time.time() + wait - first_sent >= window:
            # The key may be forgotten by the time this attempt lands: it would be a new call, not a retry.
            log.info("attempt %d: %s; the server's %gs window has passed: giving up", number, said, window)
            raise WindowPassed(key, number, last, first_sent, window)
        log.info("attempt %d: %s; retrying the same request in %.2fs", number, said, wait)
        await anyio.sleep(wait)
        back_off = min(back_off * 2, policy.max_back_off)


def done_trying(policy: Policy, number: int, patience_spent: bool) -> bool:
    """Is attempt `number` the last? The policy's attempts are spent, or the key can no longer be in progress
    (an attempt was made after that)."""
    return (policy.attempts is not None and number >= policy.attempts) or patience_spent
