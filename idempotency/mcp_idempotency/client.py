"""The client half of SEP-3182 on mcp 2.x: one idempotency key per logical tools/call, retried until answered.

    from mcp import Client
    from mcp_idempotency.client import call_tool, discover_settings

    async with Client("http://127.0.0.1:8000/mcp") as client:
        settings = await discover_settings(client)   # None: the server declares no guarantee
        result = await call_tool(client, "send_email", {"to": "ada@example.com"}, settings=settings)

It works for any tool: the key travels in request `_meta` (the default, where the server
advertises the extension), beside `arguments` (the SEP's field), or, where a tool's schema
marks one, in that argument (`model_facing` hides it from a model). In order:

1. mint one key for the logical call, before the first attempt: a random UUID, or as many
   random characters as the server's `maxKeyLength` takes;
2. send tools/call with the key where the server reads it: `params.idempotencyKey` (the SEP's
   field, which the SDK's own params model would drop, so `KeyedCallParams` declares it), or
   `params._meta["com.example.sep3182/idempotencyKey"]` (the extension's placement), or the
   argument the tool marks `x-mcp-idempotency-key` (the declared argument);
3. a timeout or a lost connection (a reset, a cut answer, a server that went away) leaves the
   outcome unknown: send the very same request again, same key, same arguments, after a
   jittered back-off, on a new connection where one can be opened (mcp_idempotency.link);
4. a rejection says whether to send it again: `error.data.retryable` where the server sets
   it, else its `error.data.type`: in progress, store full and store unavailable mean
   "come back later";
5. a conflict or an invalid key (`retryable: false`) is final: `KeyRefused`;
6. a rejection that a gateway turned into a tool result (`isError`, no acknowledgement, the
   text of one of the rejections' messages) is read as that rejection, never as the answer;
7. anything else is the call's answer: a result (`isError` included) or any other JSON-RPC
   error, returned or raised as it came. `honoured(result)` says whether the server
   acknowledged the key: a server that honours it says so in the result's `_meta`, on the
   first answer and on every replay alike.

The server's settings bound the loop: a key is never longer than `maxKeyLength`; the same
request is sent again for as long as the key may be in progress (`deadlineSeconds` +
`leaseSeconds` after the first attempt, where a live run is ended and a dead holder's claim
freed), and never `retentionSeconds` or more after the first, when the server may have
forgotten the key and would run the call again (`WindowPassed`). Then it raises `GaveUp`,
which carries the key and when it was first sent: a caller that resumes the logical call
later passes both back. Steps 3 to 7 and these bounds are `mcp_idempotency.resend`'s, the loop
the framework integrations run too; this module sends on the mcp 2.x SDK.
"""

from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError

from .discovery import Settings, discover_settings, model_facing
from .errors import IdempotencyError
from .keyed_call import KeyedCall, KeyedCallParams
from .link import Connection, reopenable, sent
from .resend import (
    GaveUp,
    KeyRefused,
    Policy,
    Reader,
    Rejection,
    WindowPassed,
    acknowledged,
    flattened,
    new_key,
    resend,
    text_of,
)
from .rules import ARGUMENT_MARK, DEFAULT_PLACEMENT, META_KEY, Placement

__all__ = [
    "Connection",
    "GaveUp",
    "KeyRefused",
    "KeyTooLong",
    "Policy",
    "Settings",
    "WindowPassed",
    "call_tool",
    "discover_settings",
    "honoured",
    "model_facing",
    "new_key",
]

# How the 2.x SDK's client reports an attempt it stopped waiting for (on stdio, it sends notifications/cancelled).
TIMED_OUT = mcp_types.REQUEST_TIMEOUT


class KeyTooLong(IdempotencyError, ValueError):
    """Raised by call_tool to a caller whose own key is longer than the server's maxKeyLength: refused before
    anything is sent, so the server sees nothing."""


# ----------------------------------------------------------------------------
# The key, the request, and what an answer says
# ----------------------------------------------------------------------------


def keyed_request(
    name: str,
    arguments: dict[str, Any],
    key: str,
    placement: Placement = DEFAULT_PLACEMENT,
    key_argument: str | None = None,
) -> mcp_types.CallToolRequest:
    """A tools/call carrying `key` where `placement` puts it; `key_argument` is the tool's marked property."""
    if placement is Placement.ARGUMENT:
        if key_argument is None:  # the tool takes no key: sent without one, a retry could run it twice
            raise ValueError(f"tool {name} declares no argument marked {ARGUMENT_MARK}: it takes no key")
        return mcp_types.CallToolRequest(
            params=mcp_types.CallToolRequestParams(name=name, arguments={**arguments, key_argument: key})
        )
    if placement is Placement.PARAMS:
        return KeyedCall(params=KeyedCallParams(name=name, arguments=arguments, idempotency_key=key))
    # _meta is an open map, typed for the SDK's own keys: the extension's key goes in as the wire has it.
    params = mcp_types.CallToolRequestParams.model_validate(
        {"name": name, "arguments": arguments, "_meta": {META_KEY: key}}
    )
    return mcp_types.CallToolRequest(params=params)


def honoured(result: mcp_types.CallToolResult) -> bool:
    """Did the server honour the call's key? A server that does says so in the result's `_meta`, the same on
    the first answer and on every replay, so the answer itself tells, whatever a gateway did to the handshake."""
    return acknowledged(result.meta)


def rejection_in(result: mcp_types.CallToolResult) -> Rejection | None:
    """The rejection a gateway turned into this tool result, or None: it is the call's answer."""
    return flattened(result.is_error, result.meta, text_of(result.content))


def raised_error(raised: BaseException) -> MCPError | None:
    """The JSON-RPC error the 2.x SDK raised, or None: the exception is not one."""
    return raised if isinstance(raised, MCPError) else None


# How the 2.x SDK shows a rejection, raised or flattened by a gateway (the framework integrations on it share it).
MCP2 = Reader(raised_error, rejection_in)


# ----------------------------------------------------------------------------
# One logical call
# ----------------------------------------------------------------------------


async def attempt(
    connection: Connection, request: mcp_types.CallToolRequest, timeout: float
) -> mcp_types.CallToolResult:
    """Send the request once, on a connection a lost answer cannot kill where one can be opened, and wait at
    most `timeout` seconds for its answer."""
    return await sent(connection, request, timeout)


def checked(key: str | None, settings: Settings) -> str:
    """The key to send: the caller's, if the server takes it, else one minted now, once for every attempt."""
    if key is None:
        return new_key(settings.max_key_length)
    if settings.max_key_length is not None and len(key) > settings.max_key_length:
        raise KeyTooLong(
            f"the key has {len(key)} characters; the server takes at most {settings.max_key_length} "
            "(maxKeyLength): nothing was sent"
        )
    return key


async def call_tool(
    connection: Connection,
    name: str,
    arguments: dict[str, Any],
    *,
    key: str | None = None,
    policy: Policy = Policy(),
    settings: Settings | None = None,
    first_sent: float | None = None,
) -> mcp_types.CallToolResult:
    """One logical tools/call: sent with one key until answered, refused, or out of time.

    `connection` is a URL, a `Client`, a `ClientSession`, or a function giving a session for each
    attempt. `settings` are the server's (`discover_settings`): where the key goes, how long it may
    be, how long it may stay in progress, how long the server keeps it. Without them (None: the
    server, or a gateway in front of it, declared nothing) the key is still sent, in `_meta`, which a
    server that does not know the extension ignores; `honoured(result)` then says whether it was
    honoured. A caller resuming a key passes back `first_sent`, the time.time() of its first attempt
    (GaveUp carries it), so every bound is counted from there.
    """
    settings = settings or Settings()
    key = checked(key, settings)
    request = keyed_request(name, arguments, key, settings.placement, settings.key_arguments.get(name))

    async def send() -> mcp_types.CallToolResult:
        """One attempt of this logical call: the very same request each time."""
        return await attempt(connection, request, policy.timeout)

    return await resend(send, MCP2, key, policy, settings, first_sent, reopenable(connection))
