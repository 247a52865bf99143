"""The client half's connection to a server: each attempt of a keyed call on a connection a lost answer cannot kill.

A stock `mcp.Client` over Streamable HTTP ends, whole, when one answer is lost: a connection reset
before the answer's headers, or a JSON body cut after them, is raised in the transport's task group,
which cancels whoever entered the Client and ends it with an ExceptionGroup, before any retry could
be sent. So an attempt does not travel on the caller's own connection when a new one can be opened:

- a URL, or a `Client` built from one: each attempt opens a connection of its own (for an entered
  Client, a copy of it with its settings and callbacks, on the protocol version it negotiated, with
  no new handshake where that version needs none), sends the request, and closes it; a lost
  connection ends that attempt alone, and the caller's Client lives on;
- a function returning a new, unopened `Client` (over a transport the caller builds, say with
  credentials): that Client, opened for the attempt and closed after it, as above;
- a `Client` over stdio, in memory, or over a transport object it was given: its own session, as
  the server's process or object is the connection, which call_tool cannot open again;
- a `ClientSession`: that session; a function returning a session: its answer, for each attempt.
"""

import dataclasses
import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["Connection"]

# How the 2.x SDK's client says the transport went away with a request outstanding.
CONNECTION_LOST = mcp_types.CONNECTION_CLOSED

# A URL (Streamable HTTP), a stock Client, one of its sessions, or a function that gives, for each
# attempt, a new Client to open, or the session to send on (a caller that reconnects its own way).
Connection = str | Client | ClientSession | Callable[[], Client] | Callable[[], Awaitable[ClientSession]]

# The SDK's own timeouts for its HTTP transport: 30 s to connect or send, 300 s between bytes of a
# response stream. An attempt's own timeout is call_tool's, and ends it sooner.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


@asynccontextmanager
async def session_for(connection: Connection) -> AsyncIterator[ClientSession]:
    """The session one attempt sends on: on a connection of its own where one can be opened (closed after
    the attempt), else the caller's Client's, the session given, or the caller's function's."""
    if isinstance(connection, str):
        async with opened(connection, connection) as client:
            yield client.session
    elif isinstance(connection, Client) and isinstance(connection.server, str):
        async with opened(connection.server, connection) as client:
            yield client.session
    elif isinstance(connection, Client):
        yield connection.session
    elif isinstance(connection, ClientSession):
        yield connection
    else:
        made = connection()
        if isinstance(made, Client):
            async with made:
                yield made.session
        else:
            yield await made


def reopenable(connection: Connection) -> bool:
    """Can the next attempt travel on a new connection? To a URL, given or a Client's, and through the
    caller's own function; not on a session, nor a Client over stdio, in memory, or a transport object."""
    if isinstance(connection, Client):
        return isinstance(connection.server, str)
    return not isinstance(connection, ClientSession)


@functools.cache
def tls() -> ssl.SSLContext:
    """The TLS settings every attempt's connection shares: building them is nearly all that opening one costs
    (a tenth of a second and more; a connection given them opens in a tenth of a millisecond)."""
    return httpx2.create_ssl_context()


@asynccontextmanager
async def opened(url: str, like: Connection) -> AsyncIterator[Client]:
    """A connection of its own to `url`, made like the caller's Client where it gave one, open while used."""
    http = httpx2.AsyncClient(timeout=HTTP_TIMEOUT, verify=tls())
    async with http, copied(like, streamable_http_client(url, http_client=http)) as client:
        yield client


def copied(like: Connection, transport: Any) -> Client:
    """A new Client on `transport`: the caller's settings and callbacks, on the protocol version it negotiated."""
    if not isinstance(like, Client):
        return Client(transport)
    discovered = like.session.discover_result
    # No response cache: a tools/call is never cached, and a cache keyed by its server needs a URL.
    if discovered is not None and like.protocol_version in MODERN_PROTOCOL_VERSIONS:
        # A 2026-07-28 request carries everything it needs: the copy sends it with no handshake first.
        return dataclasses.replace(
            like, server=transport, cache=None, mode=like.protocol_version, prior_discover=discovered
        )
    return dataclasses.replace(like, server=transport, cache=None, mode="legacy", prior_discover=None)


def lost(error: BaseException) -> bool:
    """Is this the transport giving up (a reset, a cut body, a refused connection), alone or grouped?"""
    # A stream the closing connection broke under an answer that came late, after the attempt had
    # timed out, is the same unknown outcome: the attempt is over either way.
    if isinstance(error, httpx2.TransportError | anyio.BrokenResourceError | anyio.ClosedResourceError):
        return True
    grouped = getattr(error, "exceptions", None)  # an ExceptionGroup, as the transport's task group raises
    return isinstance(grouped, tuple) and bool(grouped) and all(lost(inner) for inner in grouped)


async def sent(connection: Connection, request: mcp_types.CallToolRequest, timeout: float) -> mcp_types.CallToolResult:
    """Send the request once and wait at most `timeout` seconds for its answer; a lost connection is
    raised as the SDK's CONNECTION_CLOSED error, like any other outcome the client cannot know."""
    answer: mcp_types.CallToolResult | MCPError
    try:
        async with session_for(connection) as session:
            try:
                answer = await session.send_request(
                    request, mcp_types.CallToolResult, request_read_timeout_seconds=timeout
                )
            except MCPError as error:  # raised outside the connection's task group, which would wrap it
                answer = error
    except Exception as error:
        if not lost(error):
            raise
        raise MCPError(CONNECTION_LOST, f"connection lost: {described(error)}") from error
    if isinstance(answer, MCPError):
        raise answer
    return answer


def described(error: BaseException) -> str:
    """The first transport error in `error`, as a line: its type and message."""
    grouped: Any = getattr(error, "exceptions", None)
    if grouped:
        return described(grouped[0])
    return f"{type(error).__name__}: {error}".rstrip(": ")
