"""Bad tokens over HTTP: each gets 401 `invalid_token` pointing at the RFC 9728 metadata, which lists the scopes
the server uses, as the challenge does; nothing runs, nothing is recorded, no key is claimed, and the server keeps
serving. The forged ones are made the way an attacker makes them, and tokens the trusted issuer's own key signs
without an essential claim the way an issuer that forgot one would (tests/oauth.py). A token without the tool's
scope gets 403 on every revision and spelling, before anything runs.
"""

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from oauth import (
    CHARGE,
    EVERY_SCOPE,
    METADATA,
    READ,
    RESOURCE,
    Issuer,
    bearer,
    challenge,
    hs256_with_public_key,
    metadata_of,
    parts,
    scope_of,
    signed_without,
    start_protected,
    unsigned,
    with_signature_of,
)
from stores import decisions
from wire import text_of

pytestmark = pytest.mark.targets("2x-http")


@pytest.fixture(scope="module")
def forgers(issuer, tmp_path_factory):
    """The module's issuer's key file, and issuers that share its key or its name but not both, or sign for 1 s."""
    folder = tmp_path_factory.mktemp("keys")
    trusted = Issuer("--key", str(folder / "trusted.json"))
    with ThreadPoolExecutor(3) as pool:
        others = list(
            pool.map(
                lambda args: Issuer(*args),
                [
                    ("--key", str(folder / "trusted.json")),  # another issuer with the same key: only `iss` differs
                    ("--key", str(folder / "trusted.json"), "--issuer", trusted.url, "--lifetime", "1"),  # short-lived
                    ("--key", str(folder / "other.json"), "--issuer", trusted.url),  # the trusted name, another key
                ],
            )
        )
    yield trusted, *others
    for one in (trusted, *others):
        one.close()


@pytest.fixture(scope="module")
def guarded(forgers):
    """A server trusting the `forgers` fixture's first issuer, and Alice's token from it."""
    trusted = forgers[0]
    # The keys' URL given, as for an issuer without RFC 8414 metadata; the other tests discover it.
    wire = start_protected(trusted, "--jwks-uri", f"{trusted.url}/jwks", token=trusted.token("alice"))
    yield wire
    wire.close()


def expired(forgers) -> str:
    """A token of the trusted issuer that has expired."""
    token = forgers[2].token("alice")
    time.sleep(max(0.0, parts(token)[1]["exp"] + 1.1 - time.time()))
    return token


CHARGE_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "charge_guarded", "arguments": {"amount": 5}},
}
REVISIONS = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", None]  # None: no header, read as 2025-03-26

BAD_TOKENS = [  # (how the bad request is made, what the server logs about the token, or None if it never saw one)
    pytest.param(lambda f: ({}, ""), None, id="no-token"),
    pytest.param(lambda f: (bearer("not-a-token"), ""), "DecodeError", id="malformed"),
    pytest.param(
        lambda f: (bearer(with_signature_of(f[0].token("alice"), f[0].token("bob"))), ""),
        "BadSignatureError",
        id="wrong-signature",
    ),
    pytest.param(
        lambda f: (bearer(f[0].token("alice", resource="http://elsewhere.test/mcp")), ""),
        "InvalidClaimError: invalid_claim: Invalid claim: 'aud'",
        id="other-audience",
    ),
    pytest.param(
        lambda f: (bearer(f[1].token("alice")), ""),
        "InvalidClaimError: invalid_claim: Invalid claim: 'iss'",
        id="other-issuer",
    ),
    pytest.param(lambda f: (bearer(expired(f)), ""), "ExpiredTokenError", id="expired"),
    pytest.param(lambda f: (bearer(f[3].token("alice")), ""), "InvalidKeyIdError", id="unknown-kid"),
    pytest.param(lambda f: (bearer(unsigned(f[0].token("alice"))), ""), "UnsupportedAlgorithmError", id="alg-none"),
    pytest.param(
        lambda f: (bearer(hs256_with_public_key(f[0], f[0].token("alice"))), ""),
        "UnsupportedAlgorithmError",
        id="hs256-signed-with-the-public-key",
    ),
    pytest.param(lambda f: ({}, f"?access_token={f[0].token('alice')}"), None, id="token-in-the-query-string"),
]


ESSENTIAL_CLAIMS = ["aud", "exp", "sub", "iss"]  # what JwtVerifier requires of every token


def test_a_token_the_tests_sign_with_the_trusted_key_is_accepted_so_a_refusal_below_is_for_its_missing_claim(
    guarded, forgers
):
    token = signed_without(forgers[0], forgers[0].token("alice"), "jti")  # jti: a claim nothing requires
    status, _, text = guarded.post(
        json.dumps(guarded.frame(CHARGE_CALL)).encode(),
        {**guarded.headers(guarded.frame(CHARGE_CALL)), **bearer(token)},
    )
    assert status == 200 and "Charged 5" in text, text


@pytest.mark.parametrize("claim", ESSENTIAL_CLAIMS)
def test_a_token_of_the_trusted_issuer_missing_an_essential_claim_gets_401_keyed_or_not_and_nothing_runs(
    guarded, forgers, claim
):
    token = signed_without(forgers[0], forgers[0].token("alice"), claim)
    before = guarded.ledger()
    for key in (None, f"missing-{claim}"):
        call = guarded.frame(
            {
                "jsonrpc": "2.0",
                "id": "missing",
                "method": "tools/call",
                "params": {
                    "name": "charge_guarded",
                    "arguments": {"amount": 100},
                    **({} if key is None else {"idempotencyKey": key}),
                },
            }
        )
        headers = {name: value for name, value in guarded.headers(call).items() if name != "Authorization"}
        status, answer_headers, text = guarded.post(json.dumps(call).encode(), {**headers, **bearer(token)})
        assert (status, challenge(answer_headers)) == (401, "invalid_token"), (key, text)
    assert "MissingClaimError" in guarded.log() and f"'{claim}'" in guarded.log()
    assert guarded.ledger() == before and decisions(guarded)["claimed", f"missing-{claim}"] == 0


@pytest.mark.parametrize(("bad", "logged"), BAD_TOKENS)
def test_bad_token_gets_401_and_nothing_runs_or_is_recorded(guarded, forgers, bad, logged, request):
    key = f"bad-{request.node.callspec.id}"
    before = guarded.ledger()
    headers, query = bad(forgers)
    call = guarded.frame(
        {
            "jsonrpc": "2.0",
            "id": "bad",
            "method": "tools/call",
            "params": {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": key},
        }
    )
    sent = {name: value for name, value in guarded.headers(call).items() if name != "Authorization"}
    log_before = len(guarded.log())

    status, answer_headers, text = guarded.post(json.dumps(call).encode(), {**sent, **headers}, path="/mcp" + query)

    assert (status, challenge(answer_headers)) == (401, "invalid_token"), text
    assert metadata_of(answer_headers) == METADATA and scope_of(answer_headers) == EVERY_SCOPE
    refusals = [line for line in guarded.log()[log_before:].splitlines() if "token refused" in line]
    assert [logged in line for line in refusals] == ([] if logged is None else [True]), refusals  # for this reason
    assert guarded.alive() and guarded.ledger() == before  # still serving; nothing ran
    assert decisions(guarded)["claimed", key] == 0
    # No key was claimed: a proper call with it runs once, and then replays.
    assert text_of(guarded.charge(100, key=key)) == f"Charged 100. New balance: {before['balance'] + 100}"
    assert text_of(guarded.charge(100, key=key)) == f"Charged 100. New balance: {before['balance'] + 100}"
    assert guarded.ledger()["charges"] == before["charges"] + 1


SPOILED_BY_A_READER = [  # (MCP-Protocol-Version header or None, the body as sent, the status)
    *[pytest.param(version, json.dumps(CHARGE_CALL).encode(), 403, id=f"{version}") for version in REVISIONS],
    # No revision takes a batch, so the gate need not look inside one: the SDK refuses it whole.
    *[pytest.param(version, json.dumps([CHARGE_CALL]).encode(), 400, id=f"{version}-batch") for version in REVISIONS],
    # A member given twice: the gate reads it with the SDK's own parser, so both read the last.
    pytest.param(
        "2026-07-28",
        json.dumps(CHARGE_CALL)
        .replace('"name": "charge_guarded"', '"name": "get_balance", "name": "charge_guarded"')
        .encode(),
        403,
        id="name-twice",
    ),
]


@pytest.mark.parametrize(("version", "body", "status"), SPOILED_BY_A_READER)
def test_token_without_the_tools_scope_charges_nothing_on_any_revision_or_spelling(
    guarded, forgers, version, body, status
):
    """The scope is read from the body as the SDK reads it: every revision, a batch, a member given twice."""
    before = guarded.ledger()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **({} if version is None else {"MCP-Protocol-Version": version}),
        **bearer(forgers[0].token("alice", READ)),
    }

    answered, _, text = guarded.post(body, headers)

    assert answered == status and "Charged" not in text, text
    assert guarded.ledger() == before


def test_protected_resource_metadata_names_the_resource_its_issuer_and_its_scopes(guarded, forgers):
    """RFC 9728, where every 401 and 403 points: the resource the tokens are for, who issues them, and the scopes
    the server uses, which a client asks for when no challenge names them (the MCP authorization spec)."""
    connection = http.client.HTTPConnection("127.0.0.1", guarded.port, timeout=30)
    try:
        connection.request("GET", "/.well-known/oauth-protected-resource/mcp")
        metadata = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    assert metadata["resource"] == RESOURCE and metadata["authorization_servers"] == [forgers[0].url]
    assert metadata["scopes_supported"] == [CHARGE, READ]
