"""The client half's loop, on any SDK: send one keyed request until it is answered, refused, or out of attempts.

It needs no MCP SDK, so a framework pinned to either major of the `mcp` package (and the
integrations in `mcp_idempotency.integrations`) can key its tool calls with it:

    answer = await resend(lambda: session.call_tool(name, {**arguments, "idempotency_key": key}), protocol_error)

`send` sends the very same request each time: the caller fixes the key before the first
attempt. An attempt is abandoned after `policy.timeout` seconds; that, and a timeout or a
lost connection reported by the SDK, leaves the outcome unknown, so the request is sent
again. A rejection the server says is worth sending again (in progress, store busy) is sent
again after a growing, jittered wait. A rejection that is final (a conflict, an invalid key)
raises `Refused`; running out of attempts raises `NoAnswer`. Any other answer is the call's,
returned or raised as it came.
"""

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from .rules import CONFLICT, INVALID_KEY, RETRYABLE

__all__ = ["NoAnswer", "Policy", "ProtocolError", "Refused", "for_the_model", "resend"]

log = logging.getLogger("idempotency.client")

T = TypeVar("T")

# The codes an SDK gives an attempt whose outcome it cannot know: the connection closed (both
# majors), the read timed out (-32001 on mcp 2.x, HTTP's 408 on mcp 1.x).
UNKNOWN_OUTCOME = {-32000, -32001, 408}


@dataclass(frozen=True)
class Policy:
    """How long one attempt may take, how many attempts, and how the waits between them grow."""

    timeout: float = 30.0  # seconds per attempt; a tool slower than this is retried, and the server says in progress
    attempts: int = 8
    first_back_off: float = 0.25  # seconds, doubled after each wait that follows a retryable answer
    max_back_off: float = 8.0


class ProtocolError(Protocol):
    """A JSON-RPC error as both majors of the SDK carry it (`McpError.error`, `MCPError.error`)."""

    code: int
    message: str
    data: Any


class Refused(Exception):
    """The server refused the key for good: a conflict (the key was used with other arguments) or an invalid key."""

    def __init__(self, error: ProtocolError):
        super().__init__(f"{rejection_type(error)}: {error.message}")
        self.error = error


class NoAnswer(Exception):
    """Every attempt ended without an answer: whether the call took effect is unknown."""

    def __init__(self, attempts: int, last: str):
        super().__init__(f"no answer after {attempts} attempts (last: {last})")
        self.attempts = attempts


def for_the_model(failed: "Refused | NoAnswer") -> str:
    """What a model is told when its tool call ends without the tool's answer: what happened, never the key."""
    if isinstance(failed, Refused):
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
    return said is False or (said is None and rejection_type(error) in {CONFLICT, INVALID_KEY})


def again(error: ProtocolError) -> bool:
    """May the very same request be sent again? Yes if its outcome is unknown, or the server asked for later."""
    said = said_retryable(error)
    return error.code in UNKNOWN_OUTCOME or said is True or (said is None and rejection_type(error) in RETRYABLE)


def jittered(back_off: float) -> float:
    """A wait between half of `back_off` and all of it, so clients that failed together do not retry together."""
    return random.uniform(back_off / 2, back_off)


async def resend(
    send: Callable[[], Awaitable[T]],
    protocol_error: Callable[[BaseException], ProtocolError | None],
    policy: Policy = Policy(),
) -> T:
    """`send`'s answer, sent again until there is one; `protocol_error` finds the JSON-RPC error an exception
    carries (None: the exception is the call's own answer, raised as it came)."""
    back_off = policy.first_back_off
    for number in range(1, policy.attempts + 1):
        try:
            with anyio.fail_after(policy.timeout):
                return await send()
        except TimeoutError:
            last = f"no answer in {policy.timeout:g}s"
        except Exception as raised:
            error = protocol_error(raised)
            if error is not None and final(error):
                log.info("attempt %d: %s: final, not retried", number, rejection_type(error))
                raise Refused(error) from None
            if error is None or not again(error):
                raise
            last = rejection_type(error) or error.message
        if number < policy.attempts:
            wait = jittered(back_off)
            log.info("attempt %d: %s; retrying the same request in %.2fs", number, last, wait)
            await anyio.sleep(wait)
            back_off = min(back_off * 2, policy.max_back_off)
    log.info("attempt %d: %s; giving up", policy.attempts, last)
    raise NoAnswer(policy.attempts, last)
