"""A small OAuth 2.1 authorization server for the demo and the tests: signed JWT access tokens
by client credentials, for two clients, Alice and Bob.

    sep3182-issuer --port 9000                    a fresh signing key, in memory
    sep3182-issuer --port 9000 --key k1.json      the key in k1.json (made if missing)
    sep3182-issuer --port 9000 --key k1.json --key k2.json
                                                         a key rollover: signs with k2, publishes both

It is Authlib's own AuthorizationServer (RFC 6749 section 4.4, the client credentials
grant) with its RFC 9068 JWT access token generator, put on Starlette, which the mcp
SDK brings already. It serves:

    POST /token                                    grant_type=client_credentials, the client's id and
                                                   secret (HTTP Basic or in the form), `scope` to ask
                                                   for less than the client may have, and `resource`
                                                   (RFC 8707), which becomes the token's `aud`
    GET  /.well-known/oauth-authorization-server   RFC 8414 metadata
    GET  /jwks                                     the public keys (RFC 7517); each fetch is logged on
                                                   stderr ("issuer: served the JWKS"), so a test can count them

It listens on 127.0.0.1 only: its client secrets are written below, for a demo. The
MCP server (the 2.x ledger server --issuer URL) trusts it like any other issuer; point that
flag at Keycloak, Auth0 or Entra ID instead, and this file is not needed.
"""

import argparse
import contextvars
import json
import logging
import sys
from pathlib import Path

import uvicorn
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Payload, OAuth2Request
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant
from authlib.oauth2.rfc6749.util import list_to_scope, scope_to_list
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger("issuer")

# ----------------------------------------------------------------------------
# The clients: who may ask for a token, and for which scopes at most
# ----------------------------------------------------------------------------

SCOPES = ["ledger:charge", "ledger:read"]  # what the 2.x ledger server asks of each tool
CLIENTS = {  # client_id: (secret, scopes at most); a demo's secrets, on loopback only
    "alice": ("alice-secret", SCOPES),
    "bob": ("bob-secret", SCOPES),
}


class Client(ClientMixin):
    """One registered confidential client, as Authlib asks to see it."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.secret, self.scopes = CLIENTS[client_id]

    def get_client_id(self) -> str:
        return self.client_id

    def check_client_secret(self, client_secret: str) -> bool:
        return client_secret == self.secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == ClientCredentialsGrant.GRANT_TYPE

    def get_allowed_scope(self, scope: str | None) -> str:
        """What the client asked for, within what it may have; everything it may have if it asked for nothing."""
        asked = scope_to_list(scope) if scope else self.scopes
        return list_to_scope([name for name in asked if name in self.scopes])


# ----------------------------------------------------------------------------
# Tokens: RFC 9068 JWTs, `aud` from the RFC 8707 `resource` of the request
# ----------------------------------------------------------------------------

# The `resource` of the token request being answered: Authlib's generator asks for the
# audience without the request, so the handler leaves it here (one request per context).
requested_resource: contextvars.ContextVar[str] = contextvars.ContextVar("resource")


class Tokens(JWTBearerTokenGenerator):
    """Authlib's JWT access tokens (iss, sub, aud, exp, iat, jti, client_id, scope), signed RS256, newest key."""

    def __init__(self, issuer: str, keys: list[RSAKey], lifetime: int):
        super().__init__(issuer, alg="RS256", expires_generator=lambda _client, _grant_type: lifetime)
        self.keys = keys

    def get_jwks(self) -> KeySet:
        return KeySet([self.keys[-1]])

    def get_audiences(self, client, user, scope) -> str:
        return requested_resource.get()


class Issuer(AuthorizationServer):
    """Authlib's framework-free authorization server, spoken to through Starlette requests."""

    def query_client(self, client_id: str) -> Client | None:
        return Client(client_id) if client_id in CLIENTS else None

    def save_token(self, token, request) -> None:
        """Nothing to keep: a JWT access token carries everything the resource server checks."""

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request  # built by token() from the Starlette request

    def handle_response(self, status: int, body, headers) -> Response:
        return JSONResponse(body, status_code=status, headers=dict(headers))

    def send_signal(self, name, *args, **kwargs) -> None:
        """No listeners."""


class FormPayload(OAuth2Payload):
    """A token request's form fields, as Authlib reads them."""

    def __init__(self, form: dict[str, list[str]]):
        self.form = form

    @property
    def data(self) -> dict[str, str]:
        return {name: values[0] for name, values in self.form.items()}

    @property
    def datalist(self) -> dict[str, list[str]]:
        return self.form


class FormRequest(OAuth2Request):
    """A Starlette token request, read once, in the shape Authlib's grants expect."""

    def __init__(self, request: Request, form: dict[str, list[str]]):
        super().__init__(request.method, str(request.url), headers=request.headers)
        self.payload = FormPayload(form)

    @property
    def args(self) -> dict:
        return {}

    @property
    def form(self) -> dict[str, str]:
        return self.payload.data


# ----------------------------------------------------------------------------
# The HTTP endpoints
# ----------------------------------------------------------------------------


def application(issuer_url: str, keys: list[RSAKey], lifetime: int) -> Starlette:
    """The issuer's routes: token, metadata, JWKS."""
    server = Issuer(scopes_supported=SCOPES)
    server.register_grant(ClientCredentialsGrant)
    server.register_token_generator("default", Tokens(issuer_url, keys, lifetime))
    public = KeySet(keys).as_dict(private=False)
    metadata = {
        "issuer": issuer_url,
        "token_endpoint": f"{issuer_url}/token",
        "jwks_uri": f"{issuer_url}/jwks",
        "grant_types_supported": [ClientCredentialsGrant.GRANT_TYPE],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": SCOPES,
    }

    async def token(request: Request) -> Response:
        form = {}
        for name, value in (await request.form()).multi_items():
            form.setdefault(name, []).append(value)
        resource = form.get("resource", [None])[0]
        if resource is None:  # RFC 8707: a token names the server it is for, or it is not issued
            error = OAuth2Error(description="ask for a token for one resource: resource=<the MCP server's URL>")
            error.error = "invalid_target"
            return server.handle_error_response(None, error)
        requested_resource.set(resource)
        return server.create_token_response(FormRequest(request, form))

    async def jwks(_request: Request) -> Response:
        log.info("served the JWKS")
        return JSONResponse(public)

    async def described(_request: Request) -> Response:
        return JSONResponse(metadata)

    return Starlette(
        routes=[
            Route("/token", token, methods=["POST"]),
            Route("/jwks", jwks),
            Route("/.well-known/oauth-authorization-server", described),
        ]
    )


def signing_key(path: Path | None) -> RSAKey:
    """The RSA key in `path` (a private JWK), made and saved there if missing; a fresh one without a path."""
    if path is not None and path.exists():
        return RSAKey.import_key(json.loads(path.read_text()))
    key = RSAKey.generate_key(2048, auto_kid=True)  # kid: the key's RFC 7638 thumbprint
    if path is not None:
        path.write_text(json.dumps(key.as_dict(private=True)))
    return key


def main() -> None:
    """Serve on 127.0.0.1 until stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="the port on 127.0.0.1")
    parser.add_argument(
        "--key",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a private JWK file, made if missing (repeatable: signs with the last, publishes all)",
    )
    parser.add_argument(
        "--lifetime",
        type=int,
        default=3600,
        metavar="SECONDS",
        help="how long an access token is valid (default: 3600)",
    )
    parser.add_argument(
        "--issuer", metavar="URL", help="the URL it names itself by, its `iss` (default: http://127.0.0.1:PORT)"
    )
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    issuer_url = args.issuer or f"http://127.0.0.1:{args.port}"
    keys = [signing_key(path) for path in args.key] or [signing_key(None)]
    log.info(
        "serving %s: clients %s, signing key %s, tokens valid %ds",
        issuer_url,
        ", ".join(CLIENTS),
        keys[-1].kid,
        args.lifetime,
    )
    uvicorn.run(application(issuer_url, keys, args.lifetime), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
