"""The 2.x server over HTTP as an OAuth 2.1 resource server, as the MCP authorization specification asks.

Three parts, each plugged into the mcp 2.x SDK's own auth hooks:

1. `JwtVerifier`, the SDK's `TokenVerifier`: a bearer token is a JWT signed by the issuer,
   checked against the issuer's JWKS (fetched once, cached, fetched again only for a `kid`
   it does not know, and then at most once every JWKS_REFETCH_SECONDS), with its issuer,
   its expiry and its audience (this server's resource URL, RFC 8707) checked. A token
   that fails any check makes the SDK answer 401 with `WWW-Authenticate` pointing at the
   RFC 9728 metadata, which the SDK serves from `auth_settings()`.
2. `ScopeGate`, an ASGI middleware inside the SDK's authentication: a tools/call whose
   token lacks that tool's scope gets 403 `insufficient_scope`, before any MCP handler
   runs, so before the idempotency store is consulted. A replay is a request like any
   other: it passes this gate at the time it is made, or discloses nothing.
   It also names the scopes in the SDK's 401 challenge (RFC 6750 section 3).
3. `auth_settings()`: the SDK's `AuthSettings` for a resource server, and
   `listing_scopes()`: its RFC 9728 metadata with `scopes_supported`.

The claims this server needs from any issuer (Keycloak, Auth0, Entra ID or mcp_idempotency_demo/issuer.py):
a JWS signed with RS256 or ES256 whose header names its key (`kid`) in the issuer's JWKS;
`iss` equal to --issuer; `aud` equal to (or a list holding) --resource; `exp`; `sub`, the
principal within its issuer; and `scope`, the granted scopes separated by spaces (RFC 9068).
The JOSE work is joserfc's, the library Authlib itself is built on: one JOSE library for
the issuer and the server, well kept, typed, and strict by default (it rejects `alg: none`
and any algorithm it is not given). Nothing here parses a token or checks a signature by hand.
"""

import json
import logging
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, KeySetSerialization
from joserfc.jwt import JWTClaimsRegistry
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from pydantic import AnyHttpUrl
from pydantic_core import from_json
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["JwtVerifier", "ScopeGate", "auth_settings", "listing_scopes"]

log = logging.getLogger("idempotency.auth")

ALGORITHMS = ["RS256", "ES256"]  # asymmetric only: HS256 "signed" with a public key is refused
JWKS_REFETCH_SECONDS = 5.0  # an unknown kid fetches the keys again at most this often: never once per request
FETCH_TIMEOUT = 10  # seconds


def fetched_json(url: str) -> Any:
    """GET a JSON document (blocking: run it in a worker thread)."""
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
        return json.load(response)


def fetched_key_set(url: str) -> KeySetSerialization:
    """GET a JWKS; joserfc checks each key as it imports them."""
    key_set: KeySetSerialization = fetched_json(url)
    return key_set


def metadata_url(issuer: str) -> str:
    """RFC 8414 section 3: the issuer's metadata, the well-known part inserted before the issuer's path."""
    parts = urlsplit(issuer)
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{parts.path.rstrip('/')}"


class JwtVerifier:
    """The SDK's TokenVerifier: a JWT access token, checked against the issuer's keys and claims."""

    def __init__(self, issuer: str, resource: str, jwks_uri: str | None = None):
        self.issuer, self.resource, self.jwks_uri = issuer, resource, jwks_uri
        self.claims = JWTClaimsRegistry(
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "value": resource},
            sub={"essential": True},
            exp={"essential": True},
        )
        self.keys: KeySet | None = None
        self.fetched_at = float("-inf")
        self.fetching = anyio.Lock()

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's grant if every check passes; None (the SDK answers 401) otherwise."""
        try:
            kid = jws.extract_compact(token.encode()).headers().get("kid")  # parsed by joserfc, not yet trusted
            verified = jwt.decode(token, await self.keys_for(kid), algorithms=ALGORITHMS)
            self.claims.validate(verified.claims)
        except (JoseError, ValueError, OSError) as refused:  # OSError: the issuer's keys could not be fetched
            log.info("token refused: %s", f"{type(refused).__name__}: {refused}".splitlines()[0])
            return None
        claims = verified.claims
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", claims["sub"])),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=self.resource,
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )

    async def keys_for(self, kid: str | None) -> KeySet:
        """The issuer's keys: fetched once, and again for an unknown kid, at most every JWKS_REFETCH_SECONDS."""
        if self.missing(kid):
            async with self.fetching:  # requests that arrive together wait for one fetch
                if self.missing(kid) and time.monotonic() - self.fetched_at >= JWKS_REFETCH_SECONDS:
                    await self.fetch()
        if self.keys is None:
            raise ConnectionError("no keys yet: the issuer's JWKS could not be fetched")
        return self.keys

    def missing(self, kid: str | None) -> bool:
        """No keys yet, or none with this kid."""
        return self.keys is None or (kid is not None and not any(key.kid == kid for key in self.keys))

    async def fetch(self) -> None:
        """Fetch the JWKS (its URL from the issuer's RFC 8414 metadata, the first time, unless given)."""
        self.fetched_at = time.monotonic()  # a failed fetch counts too: an issuer that is down is not hammered
        if self.jwks_uri is None:
            self.jwks_uri = str((await anyio.to_thread.run_sync(fetched_json, metadata_url(self.issuer)))["jwks_uri"])
        self.keys = KeySet.import_key_set(await anyio.to_thread.run_sync(fetched_key_set, self.jwks_uri))
        log.info("fetched the JWKS from %s: keys %s", self.jwks_uri, ", ".join(key.kid or "?" for key in self.keys))


def auth_settings(issuer: str, resource: str) -> AuthSettings:
    """The SDK's settings for a resource server: RFC 9728 metadata naming the issuer, at its well-known URL."""
    # The verifier checks the audience itself (joserfc's claims registry), so the SDK need not.
    # Validated from the strings, so the SDK's model keeps a path-less issuer as given: issuer
    # identifiers compare as exact strings (RFC 8414), and AnyHttpUrl alone would add a "/".
    return AuthSettings.model_validate(
        {"issuer_url": issuer, "resource_server_url": resource, "validate_token_resource": False}
    )


def listing_scopes(app: Starlette, settings: AuthSettings, scopes: list[str]) -> None:
    """RFC 9728 metadata listing the scopes this server uses (`scopes_supported`): what a client may ask for."""
    # The SDK lists AuthSettings.required_scopes there, but its middleware then requires every one
    # of them on every request, and a ledger:read token could not read the balance. So the SDK's
    # own public function builds the same metadata route with the scopes listed, and it takes the
    # place of the route the SDK built without them.
    if settings.resource_server_url is None:
        raise ValueError("listing_scopes needs AuthSettings with resource_server_url: build them with auth_settings()")
    listed = create_protected_resource_routes(
        settings.resource_server_url, [settings.issuer_url], scopes_supported=scopes
    )
    paths = {route.path for route in listed}
    app.router.routes[:] = [
        *listed,
        *(route for route in app.router.routes if getattr(route, "path", None) not in paths),
    ]


# ----------------------------------------------------------------------------
# Per-tool scopes: 403 before any handler runs
# ----------------------------------------------------------------------------


class ScopeGate:
    """An ASGI middleware after the SDK's authentication: a tools/call needs its tool's scope, or gets 403;
    a 401 names the scopes."""

    def __init__(self, app: ASGIApp, scopes: dict[str, str], resource: str):
        self.app, self.scopes = app, scopes
        self.metadata = str(build_resource_metadata_url(AnyHttpUrl(resource)))
        self.every_scope = sorted(set(scopes.values()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            # No valid token: the SDK answers 401 itself; its challenge is told the scopes.
            return await self.app(scope, receive, naming_scopes(send, self.every_scope))
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = await body_up_to(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
        needed = None if more else self.scope_needed(body)  # too large: the SDK answers 413; nothing runs
        if needed is not None and needed not in user.scopes:
            log.info("insufficient scope: %s needs %s, the token has %s", scope["path"], needed, user.scopes)
            return await self.refuse(send, needed)
        await self.app(scope, replaying(body, more, receive), send)

    def scope_needed(self, body: bytes) -> str | None:
        """The scope the tool of a tools/call needs; None for any other message, or one the SDK will reject."""
        try:
            message = from_json(body)  # the SDK's own JSON parser: the name read here is the name it reads
        except ValueError:
            return None  # the SDK answers it with a parse error; nothing runs
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        return self.scopes.get(name) if isinstance(name, str) else None

    async def refuse(self, send: Send, needed: str) -> None:
        """403 as the MCP authorization spec words it: the scope for this operation only (SEP-2350)."""
        body = json.dumps({"error": "insufficient_scope", "error_description": f"Required scope: {needed}"}).encode()
        challenge = f'Bearer error="insufficient_scope", scope="{needed}", resource_metadata="{self.metadata}"'
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", challenge.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def naming_scopes(send: Send, scopes: list[str]) -> Send:
    """A `send` that adds `scope` to a 401's Bearer challenge: every scope this server uses (RFC 6750 section 3)."""
    # The MCP authorization spec asks for it (SHOULD), and a client asks its issuer for what
    # it names; the SDK's 401 has no parameter for it, so it is added to the header it sends.
    named = f', scope="{" ".join(scopes)}"'.encode()

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 401:
            message = {
                **message,
                "headers": [
                    (name, value + named if name.lower() == b"www-authenticate" else value)
                    for name, value in message["headers"]
                ],
            }
        await send(message)

    return sending


async def body_up_to(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, read until it ends or passes `limit` bytes; and whether more is to come."""
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= limit:
        message = await receive()
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
    return b"".join(chunks), more


def replaying(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that hands on what was read, then reads on from the client as the original does."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": more}

    return again
