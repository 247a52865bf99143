"""The real issuer (mcp_idempotency_demo.issuer) as a subprocess on 127.0.0.1, and its tokens, for the auth tests.

Every token here is a real one, signed by the issuer's key and fetched from its token
endpoint by client credentials, except the forgeries `forged()` builds on purpose:
an attacker's tokens, made the way an attacker makes them.
"""

import base64
import hashlib
import hmac
import http.client
import itertools
import json
import re
import subprocess
import tempfile
import time
from urllib.parse import urlencode

from wire import REPLY_TIMEOUT, free_port, sdk2_python, start

ISSUER = ["-m", "mcp_idempotency_demo.issuer"]
# Every instance of one deployment is one resource, the `aud` of its tokens (RFC 8707),
# whatever port each instance listens on: the URL its clients know it by.
RESOURCE = "http://ledger.test/mcp"
READ, CHARGE = "ledger:read", "ledger:charge"
METADATA = "http://ledger.test/.well-known/oauth-protected-resource/mcp"  # RFC 9728, for RESOURCE
EVERY_SCOPE = f"{CHARGE} {READ}"  # what a 401 names: every scope the server uses, as its metadata lists them


class Issuer:
    """The demo issuer, started and listening; stopped by close()."""

    def __init__(self, *args: str, port: int | None = None):
        self.key_files = [path for flag, path in itertools.pairwise(args) if flag == "--key"]  # it signs with the last
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the server's stderr, open as long as it runs)
        self.process = subprocess.Popen(
            [sdk2_python(), *ISSUER, "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            text=True,
        )
        deadline = time.monotonic() + REPLY_TIMEOUT
        while "serving" not in self.log() or not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the issuer did not start:\n{self.log()}")
            time.sleep(0.05)

    def answers(self) -> bool:
        """Does its metadata endpoint answer?"""
        try:
            return self.get("/.well-known/oauth-authorization-server")[0] == 200
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def token(self, client: str, scope: str | None = None, resource: str = RESOURCE) -> str:
        """A fresh access token for `client` (alice or bob), by client credentials."""
        form = {"grant_type": "client_credentials", "resource": resource, **({"scope": scope} if scope else {})}
        credentials = base64.b64encode(f"{client}:{client}-secret".encode()).decode()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT)
        try:
            connection.request(
                "POST",
                "/token",
                body=urlencode(form),
                headers={"Content-Type": "application/x-www-form-urlencoded", "Authorization": f"Basic {credentials}"},
            )
            answer = json.loads(connection.getresponse().read())
        finally:
            connection.close()
        assert "access_token" in answer, answer
        return answer["access_token"]

    def jwks_fetches(self) -> int:
        """How many times its JWKS was fetched."""
        return self.log().count("issuer: served the JWKS")

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=REPLY_TIMEOUT)


def bearer(token: str) -> dict:
    """The Authorization header for a token."""
    return {"Authorization": f"Bearer {token}"}


def start_protected(issuer: Issuer, *server_args: str, token: str):
    """The 2.x ledger server over HTTP, trusting `issuer`, spoken to with `token` until told otherwise."""
    return start("2x-http", "--issuer", issuer.url, "--resource", RESOURCE, *server_args, headers=bearer(token))


def as_caller(wire, token: str) -> None:
    """From now on, `wire` sends `token`."""
    wire.extra_headers = bearer(token)


# ----------------------------------------------------------------------------
# An attacker's tokens
# ----------------------------------------------------------------------------


# joserfc signs, in the mcp 2.x environment that has it: the issuer's own key, the claims we choose.
SIGN = """
import json, sys
from joserfc import jwt
from joserfc.jwk import RSAKey
key = RSAKey.import_key(json.load(open(sys.argv[1])))
print(jwt.encode({"alg": "RS256", "kid": key.kid}, json.loads(sys.argv[2]), key))
"""


def signed_without(issuer: Issuer, token: str, claim: str) -> str:
    """`token`'s claims less `claim`, signed with the issuer's own key: what an issuer that forgot a claim mints."""
    claims = {name: value for name, value in parts(token)[1].items() if name != claim}
    signing = [sdk2_python(), "-c", SIGN, issuer.key_files[-1], json.dumps(claims)]
    return subprocess.run(signing, capture_output=True, text=True, check=True, timeout=REPLY_TIMEOUT).stdout.strip()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def parts(token: str) -> tuple[dict, dict, str]:
    """A real token's header and claims, read as the attacker reads them (no check), and its signature."""
    header, claims, signature = token.split(".")
    return (
        json.loads(base64.urlsafe_b64decode(header + "==")),
        json.loads(base64.urlsafe_b64decode(claims + "==")),
        signature,
    )


def unsigned(token: str) -> str:
    """The token's claims under `alg: none`, with an empty signature."""
    header, claims, _ = parts(token)
    return f"{b64(json.dumps({**header, 'alg': 'none'}).encode())}.{b64(json.dumps(claims).encode())}."


def public_key_pem(issuer: Issuer, kid: str) -> bytes:
    """The issuer's public key `kid` in PEM: what a verifier trusting the token's `alg` would take as an HMAC secret."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

    jwk = next(key for key in json.loads(issuer.get("/jwks")[1])["keys"] if key["kid"] == kid)

    def number(name: str) -> int:
        """One of the key's JWK integers, base64url and big-endian (RFC 7518 section 6.3.1)."""
        return int.from_bytes(base64.urlsafe_b64decode(jwk[name] + "=="), "big")

    key = RSAPublicNumbers(number("e"), number("n")).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def hs256_with_public_key(issuer: Issuer, token: str) -> str:
    """The token's claims, HS256-"signed" with the issuer's public key: the algorithm confusion attack."""
    header, claims, _ = parts(token)
    signing_input = f"{b64(json.dumps({**header, 'alg': 'HS256'}).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(public_key_pem(issuer, header["kid"]), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def with_signature_of(token: str, other: str) -> str:
    """The token's header and claims under another real token's signature: a wrong signature."""
    return token.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1]


CHALLENGE = re.compile(r'Bearer error="(\w+)"')


def challenge(headers: dict) -> str | None:
    """The `error` of a WWW-Authenticate: Bearer challenge, if any."""
    found = CHALLENGE.match({name.lower(): value for name, value in headers.items()}.get("www-authenticate", ""))
    return found and found[1]


def challenge_parameter(headers: dict, name: str) -> str | None:
    """One parameter of the WWW-Authenticate: Bearer challenge, if it is there."""
    value = {header.lower(): value for header, value in headers.items()}["www-authenticate"]
    found = re.search(rf'\b{name}="([^"]*)"', value)
    return found and found[1]


def metadata_of(headers: dict) -> str:
    """The resource_metadata URL a challenge points at (RFC 9728)."""
    return challenge_parameter(headers, "resource_metadata")


def scope_of(headers: dict) -> str | None:
    """The scopes a challenge names, separated by spaces (RFC 6750 section 3)."""
    return challenge_parameter(headers, "scope")
