"""The client half of SEP-3182 on mcp 2.x: one idempotency key per logical tools/call, retried until answered.

    from mcp import Client
    from mcp_idempotency.client import call_tool, discover_settings

    async with Client(server) as client:
        settings = await discover_settings(client)   # None: the server gives no guarantee
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
3. a timeout or a lost connection leaves the outcome unknown: send the very same request
   again, same key, same arguments, after a jittered back-off;
4. a rejection says whether to send it again: `error.data.retryable` where the server sets
   it, else its `error.data.type`: in progress, store full and store unavailable mean
   "come back later";
5. a conflict or an invalid key (`retryable: false`) is final: `KeyRefused`;
6. anything else is the call's answer: a result (`isError` included) or any other JSON-RPC
   error, returned or raised as it came.

The server's settings bound the loop further: a key is never longer than `maxKeyLength`,
and no attempt is made `retentionSeconds` or more after the first, when the server may have
forgotten the key and would run the call again (`WindowPassed`). After `attempts` tries it
raises `GaveUp`, which carries the key and when it was first sent: a caller that resumes
the logical call later passes both back. A server that advertises no capability gives no
guarantee: do not retry a tool with effects on it.
"""

import logging
import random
import secrets
import string
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from mcp import Client, ClientSession
from mcp.shared.exceptions import MCPError

from .keyed_call import KeyedCall, KeyedCallParams
from .rules import (
    ARGUMENT_MARK,
    CONFLICT,
    DEFAULT_PLACEMENT,
    EXTENSION_ID,
    INVALID_KEY,
    META_KEY,
    RETRYABLE,
    Placement,
    marked_argument,
    without_key,
)

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
    "keyed_request",
    "model_facing",
    "new_key",
]

log = logging.getLogger("idempotency.client")

# How the 2.x SDK's client reports an attempt whose outcome it cannot know.
TIMED_OUT = mcp_types.REQUEST_TIMEOUT  # it stopped waiting (and, on stdio, sent notifications/cancelled)
CONNECTION_LOST = mcp_types.CONNECTION_CLOSED  # the transport went away with the request outstanding
UNKNOWN_OUTCOME = {TIMED_OUT, CONNECTION_LOST}
# What error.data.type says where error.data.retryable says nothing: the code alone (-32602
# for every rejection) does not say which is worth sending again.
COME_BACK_LATER = RETRYABLE  # in progress, store full, store unavailable
FINAL = {CONFLICT, INVALID_KEY}

# A stock Client, one of its sessions, or a function that gives the session for each attempt
# (a client that reconnects after a lost connection passes one).
Connection = Client | ClientSession | Callable[[], Awaitable[ClientSession]]


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
        super().__init__(f"{rejection_type(error)}: {error.message}")
        self.error = error


class GaveUp(Exception):
    """Every attempt ended without an answer; `key` and `first_sent` resume the same logical call later."""

    def __init__(self, key: str, attempts: int, last: MCPError, first_sent: float):
        super().__init__(f"no answer after {attempts} attempts (last: {last.message}); key {key}")
        self.key, self.last, self.first_sent = key, last, first_sent  # first_sent: time.time() of the first attempt


class WindowPassed(GaveUp):
    """The server's retention window has passed since the first attempt: it may have forgotten the key,
    so sending it again could run the call a second time. Nothing more is sent."""

    def __init__(self, key: str, attempts: int, last: MCPError, first_sent: float, window: float):
        super().__init__(key, attempts, last, first_sent)
        self.args = (
            f"the server keeps a key {window:g} s and the first attempt was sent longer ago: another would "
            f"not be a retry but maybe a second call (after {attempts} attempts, last: {last.message}); "
            f"key {key}",
        )


class KeyTooLong(ValueError):
    """A caller's key longer than the server's maxKeyLength: refused here, before anything is sent."""


# ----------------------------------------------------------------------------
# What the server declares: its capability, in the placement it reads keys in
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What a server declares: where it reads the key, and its limits (None where it declares none)."""

    placement: Placement = DEFAULT_PLACEMENT
    max_key_length: int | None = None
    retention_seconds: float | None = None
    key_arguments: Mapping[str, str] = field(default_factory=dict)  # argument placement: tool -> marked property

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
                return cls(placement, positive(declared, "maxKeyLength"), positive(declared, "retentionSeconds"))
        return None


def positive(declared: dict[str, Any], name: str) -> int | None:
    """A setting a client can rely on: a whole number above zero; anything else is none."""
    value = declared.get(name)
    return value if type(value) is int and value > 0 else None


async def session_of(connection: Connection) -> ClientSession:
    """The session to send on: the client's, the one given, or the caller's reconnect function's."""
    if isinstance(connection, Client):
        return connection.session
    if isinstance(connection, ClientSession):
        return connection
    return await connection()


async def discover_settings(
    connection: Connection, version: str = mcp_types.LATEST_PROTOCOL_VERSION
) -> Settings | None:
    """What the server declares, read from server/discover as it came off the wire (the SDK's typed
    capabilities drop tools.idempotency); None when it declares nothing, or has no server/discover."""
    session = await session_of(connection)
    try:
        discovered = await session.send_discover(version)
    except MCPError:  # a 2025 server: no server/discover, so nothing this client may rely on
        return None
    return Settings.from_capabilities(discovered.get("capabilities")) or await declared_arguments(session)


async def declared_arguments(session: ClientSession) -> Settings | None:
    """The argument placement, which advertises no capability: the tools whose schema marks a key property."""
    tools = (await session.list_tools()).tools
    marked = {tool.name: name for tool in tools if (name := marked_argument(tool.input_schema)) is not None}
    return Settings(Placement.ARGUMENT, key_arguments=marked) if marked else None


def model_facing(tools: list[mcp_types.Tool]) -> list[mcp_types.Tool]:
    """The tool list to give a model: each marked key property taken out, so the model never sees or fills it."""
    return [tool.model_copy(update={"input_schema": without_key(tool.input_schema)}) for tool in tools]


# ----------------------------------------------------------------------------
# The key, the request, and what an answer says
# ----------------------------------------------------------------------------

KEY_ALPHABET = string.ascii_letters + string.digits + "-_"  # 6 bits a character


def new_key(max_length: int | None = None) -> str:
    """A fresh idempotency key: a random UUID, so two logical calls never share one by chance; where the
    server takes fewer than its 36 characters, as many random characters as it takes."""
    key = str(uuid.uuid4())
    if max_length is None or len(key) <= max_length:
        return key
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(max_length))


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


def rejection_type(error: MCPError) -> str | None:
    """What a client branches on, error.data.type; None when the error is not an idempotency rejection."""
    return error.data.get("type") if isinstance(error.data, dict) else None


def said_retryable(error: MCPError) -> bool | None:
    """An idempotency rejection's own word, error.data.retryable; None where the server gives none."""
    if rejection_type(error) is None or not isinstance(error.data, dict):
        return None
    value = error.data.get("retryable")
    return value if isinstance(value, bool) else None


def final(error: MCPError) -> bool:
    """Is it a refusal of this request for good? data.retryable false where given, else a final type."""
    said = said_retryable(error)
    return said is False or (said is None and rejection_type(error) in FINAL)


def retryable(error: MCPError) -> bool:
    """May the very same request be sent again? Yes if its outcome is unknown, or the server asked for later
    (data.retryable true where given, else a come-back-later type)."""
    said = said_retryable(error)
    return error.code in UNKNOWN_OUTCOME or said is True or (said is None and rejection_type(error) in COME_BACK_LATER)


# ----------------------------------------------------------------------------
# One logical call
# ----------------------------------------------------------------------------


async def attempt(
    connection: Connection, request: mcp_types.CallToolRequest, timeout: float
) -> mcp_types.CallToolResult:
    """Send the request once and wait at most `timeout` seconds for its answer."""
    session = await session_of(connection)
    return await session.send_request(request, mcp_types.CallToolResult, request_read_timeout_seconds=timeout)


def jittered(back_off: float) -> float:
    """A wait between half of `back_off` and all of it, so clients that failed together do not retry together."""
    return random.uniform(back_off / 2, back_off)


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
    """One logical tools/call: sent with one key until answered, refused, or out of attempts.

    `settings` are the server's (`discover_settings`): where the key goes, how long it may be,
    how long the server keeps it. A caller resuming a key passes back `first_sent`, the
    time.time() of its first attempt (GaveUp carries it), so the window is counted from there.
    """
    settings = settings or Settings()
    key = checked(key, settings)
    request = keyed_request(name, arguments, key, settings.placement, settings.key_arguments.get(name))
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
        said = rejection_type(last) or last.message
        window = settings.retention_seconds
        if window is not None and time.time() + wait - first_sent >= window:
            # The key may be forgotten by the time this attempt lands: it would be a new call, not a retry.
            log.info("attempt %d: %s; the server's %gs window has passed: giving up", number, said, window)
            raise WindowPassed(key, number, last, first_sent, window)
        log.info("attempt %d: %s; retrying the same request in %.2fs", number, said, wait)
        await anyio.sleep(wait)
        back_off = min(back_off * 2, policy.max_back_off)
    log.info("attempt %d: %s; giving up", policy.attempts, rejection_type(last) or last.message)
    raise GaveUp(key, policy.attempts, last, first_sent)
