"""SEP-3182 on the current SDK: an MCPServer (mcp 2.x) that honours idempotencyKey on tools/call.

It serves the 2026-07-28 revision (server/discover, a self-contained request each
time) and the 2025 handshake, over stdio or stateless Streamable HTTP, and keeps
its records and its ledger in a store that every instance shares (sdk2/store/).

Read it top to bottom, in the order of the SEP:

1. the SDK check: refuse to run unless the raw key reaches our middleware (P12');
2. the ledger and its tools, which know nothing about idempotency;
3. the dispatch layer, a server middleware that sees every message before any
   handler: read the key (P1, P2), fingerprint the request (P3), claim the key
   (P16), then conflict, in progress, replay (P20), or run the tool and record
   its outcome in one transaction with its side effect (P4, P7, P17, P18);
4. whose key it is: the principal a record is scoped to (K2, P10'', P21), and the
   per-tool scopes a token must carry, checked before the store is consulted (K3, P22);
5. the capability (P14), the command line and the transports.

Ids such as S1 (a rule of SEP-3182, as this project lists them) and P9 (a position it
takes where the SEP is silent) are this project's: the SEP numbers nothing;
tests/CONFORMANCE.md lists both.
"""

import argparse
import ipaddress
import json
import logging
import sys
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

try:
    import anyio
    import anyio.lowlevel
    import mcp_types
    from mcp import Client
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.shared.exceptions import MCPError
    from mcp_types.methods import serialize_server_result, validate_client_request
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    from pydantic import ValidationError
    from pydantic_core import from_json, to_json

    import sep3182
    from sep3182 import CONFLICT, IN_PROGRESS, INVALID_KEY, STORE_FULL, STORE_UNAVAILABLE
    from store import Full, Held, Limits, StoreUnavailable, Won, open_store
except ImportError as missing:  # no SDK, or the 1.x one
    sys.exit(f"{Path(sys.argv[0]).name} needs the mcp 2.x SDK, which this Python cannot import ({missing}); "
             "install it: pip install -r sdk2/requirements.txt")

log = logging.getLogger("idempotency")

# ----------------------------------------------------------------------------
# 1. The SDK check (P12')
# ----------------------------------------------------------------------------

SDK_HIDES_KEY = (
    "mcp {version} does not hand a tools/call's idempotencyKey to server middleware before the "
    "tool runs ({why}), so nothing would be deduplicated; install the SDK this server was "
    "tested on: pip install -r sdk2/requirements.txt"
)


class KeyedCallParams(mcp_types.CallToolRequestParams):
    """tools/call params with the key beside `arguments`: 2.x's own model would drop it."""

    idempotency_key: str | None = None  # the SDK's camelCase aliases put it on the wire as idempotencyKey


class KeyedCall(mcp_types.CallToolRequest):
    """A tools/call request that carries KeyedCallParams."""

    params: KeyedCallParams


async def what_the_sdk_does_with_a_key() -> list[str]:
    """P12': send a keyed tools/call through the SDK, in process; list what saw the key, in order."""
    seen = []

    async def watch(ctx, call_next):
        if ctx.method == "tools/call":
            seen.append(f"middleware saw {(ctx.params or {}).get('idempotencyKey')!r}")
        return await call_next(ctx)

    probe = MCPServer("probe", middleware=[watch])

    @probe.tool()
    def ran() -> str:
        seen.append("tool ran")
        return "ran"

    async with Client(probe, mode="legacy") as client:  # JSON-RPC messages over memory streams
        result = await client.session.send_request(
            KeyedCall(params=KeyedCallParams(name="ran", arguments={}, idempotency_key="probe")),
            mcp_types.CallToolResult)
    return seen + ([] if result.is_error else ["call succeeded"])


def sdk_hides_the_key() -> str | None:
    """P12': None if a raw key reaches middleware before the tool runs and the call succeeds; else why not."""
    expected = ["middleware saw 'probe'", "tool ran", "call succeeded"]
    try:
        seen = anyio.run(what_the_sdk_does_with_a_key)
    except Exception as error:  # a build that rejects the key, or moved what we rely on
        while isinstance(getattr(error, "exceptions", None), tuple):  # the first failure in a task group
            error = error.exceptions[0]
        return f"the probe failed: {type(error).__name__}: {error}".splitlines()[0]
    return None if seen == expected else "the probe saw: " + (", ".join(seen) or "nothing")


# ----------------------------------------------------------------------------
# 2. The ledger and its tools: no idempotency code below this line until part 3
# ----------------------------------------------------------------------------

LEASE_SECONDS = 30.0  # P18: longer than any tool here may run, short enough for a retry to wait out
STORE = "sqlite:sep3182.db"  # P15: one file, shared by every instance started in this folder

settings: argparse.Namespace | None = None  # the command line: main() reads it before serving


@asynccontextmanager
async def shared_store(_server):
    """P15: the store the command line names, open while the server runs; handlers find it in their context."""
    limits = Limits(settings.retention, settings.lease, settings.max_records)
    async with open_store(settings.store, limits) as store:
        yield store


SERVER_INFO = {"name": "sep-3182-demo", "version": "2.0"}
mcp = MCPServer(**SERVER_INFO, log_level="WARNING", lifespan=shared_store)  # WARNING: stderr is for our decisions


async def charge(ctx: Context, amount: int) -> str:
    """Apply one charge to the ledger: the side effect that must not happen twice."""
    await anyio.sleep(settings.charge_delay)  # a slow payment processor, to catch a call in flight
    async with ctx.request_context.lifespan_context.transaction() as ledger:
        balance = await ledger.charge(amount)
    return f"Charged {amount}. New balance: {balance}"


# K3, P22: what a token must carry to call each tool over HTTP with authorisation;
# checked on every request, a replay included, before the store is consulted.
TOOL_SCOPES = {"charge_unguarded": "ledger:charge", "charge_guarded": "ledger:charge",
               "reset_ledger": "ledger:charge", "get_balance": "ledger:read"}


@mcp.tool()
async def charge_unguarded(amount: sep3182.Amount, ctx: Context) -> str:
    """Charge `amount`. The demo calls this one without an idempotencyKey; a key would be honoured."""
    return await charge(ctx, amount)


@mcp.tool()
async def charge_guarded(amount: sep3182.Amount, ctx: Context) -> str:
    """Charge `amount`. The demo calls this one with an idempotencyKey."""
    return await charge(ctx, amount)


@mcp.tool()
async def reset_ledger(ctx: Context) -> str:
    """Test helper: zero the balance and the charge count; recorded keys are kept."""
    async with ctx.request_context.lifespan_context.transaction() as ledger:
        await ledger.reset_ledger()
    return "Ledger reset."


@mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
async def get_balance(ctx: Context) -> dict[str, int]:
    """Test helper: the ground truth, the balance and how many charges were applied."""
    async with ctx.request_context.lifespan_context.transaction() as ledger:
        return await ledger.ledger()


# ----------------------------------------------------------------------------
# 3. The dispatch layer
# ----------------------------------------------------------------------------


def rejection(kind: str, key: str | None = None, detail: str | None = None) -> MCPError:
    """P5: the JSON-RPC error for an idempotency rejection; never recorded (P6)."""
    return MCPError(**sep3182.rejection(kind, key, detail))


def well_formed(ctx) -> bool:
    """Would the SDK accept these tools/call params? If not, it answers them itself and nothing runs."""
    try:
        validate_client_request("tools/call", ctx.protocol_version, ctx.params)
        return True
    except (ValidationError, KeyError, ValueError):
        return False


def key_of(params: dict) -> str | None:
    """P1, P2: the request's idempotencyKey, or None when it carries none."""
    # P1: only the sibling of `name` and `arguments` counts; a field of the same
    # name inside `arguments` or `_meta` is the tool's business, not a key.
    try:
        return sep3182.checked_key(params.get("idempotencyKey"))
    except sep3182.InvalidKey as bad:
        log.debug("invalid key: %s", bad)
        raise rejection(INVALID_KEY, None, str(bad)) from None


def recorded(outcome: dict | MCPError, revision: str) -> str:
    """P6: an outcome as the store keeps it: a result with the revision it was shaped for, or an error."""
    if isinstance(outcome, MCPError):
        return to_json({"error": outcome.error.model_dump(exclude_none=True)}).decode()
    return to_json({"revision": revision, "result": outcome}).decode()


def shaped_for(result: dict, recorded_for: str, revision: str) -> dict:
    """P20: a recorded result in the shape of the revision the retry speaks."""
    if revision == recorded_for:
        return result  # byte for byte (P6)
    # 2026-07-28 results carry resultType and a serverInfo stamp in _meta that the
    # 2025 handshake revisions do not define, and a 2026 client requires them.
    result = dict(result)
    meta = {name: value for name, value in result.pop("_meta", {}).items()
            if name != mcp_types.SERVER_INFO_META_KEY}
    result.pop("resultType", None)
    if revision in MODERN_PROTOCOL_VERSIONS:
        result["resultType"] = "complete"
        meta[mcp_types.SERVER_INFO_META_KEY] = dict(SERVER_INFO)
    if meta:
        result["_meta"] = meta
    return serialize_server_result("tools/call", revision, result)


def replay(outcome: str, revision: str) -> dict:
    """P4.4 (S2): answer with the recorded outcome; the tool does not run."""
    outcome = from_json(outcome)
    if "error" in outcome:
        raise MCPError(**outcome["error"])
    return shaped_for(outcome["result"], outcome["revision"], revision)


def internal_error() -> MCPError:
    """P6': what anything unexpected becomes: a fixed message, no exception text leaked to the client."""
    return MCPError(**sep3182.INTERNAL_ERROR)


async def outcome_of(ctx, call_next, key: str) -> dict | MCPError:
    """P6': whatever the SDK's tools/call handler produces, a result or a JSON-RPC error; an
    internal error when something unexpected escapes it, so the key never stays running."""
    try:
        return await call_next(ctx)
    except MCPError as error:
        return error
    except Exception:
        log.exception("internal error: key=%r tool=%s", key, ctx.params["name"])  # the traceback, to stderr
        return internal_error()


def recorded_as(outcome: dict | MCPError, key: str, revision: str) -> tuple[dict | MCPError, str]:
    """P6': the outcome and its text for the store; an outcome that cannot be written down is an internal error."""
    try:
        return outcome, recorded(outcome, revision)
    except Exception:
        log.exception("internal error: key=%r, its outcome cannot be recorded", key)
        return internal_error(), recorded(internal_error(), revision)


async def run_and_record(ctx, call_next, key: str, fingerprint: bytes) -> tuple[dict | MCPError, bool]:
    """P17, P18: run the tool and commit its outcome with its side effect: (the outcome, recorded or fenced)."""
    # P17: the tool's ledger write joins this transaction, so the charge and the
    # completed record commit together or not at all.
    async with ctx.lifespan_context.transaction() as tx:
        outcome = await outcome_of(ctx, call_next, key)
        if tx.failure is not None:
            # P23: the store failed under the tool (the SDK made that an isError
            # result): that is no outcome of the tool's, and nothing is recorded.
            raise StoreUnavailable("the unit of work failed") from tx.failure
        if isinstance(outcome, MCPError) and outcome.error.code == sep3182.URL_ELICITATION_REQUIRED:
            raise outcome  # rolls the unit of work back; run_once gives the key back
        outcome, text = recorded_as(outcome, key, ctx.protocol_version)
        return outcome, await tx.commit_with_record(record_key(ctx, key), fingerprint, text)


async def give_back(ctx, key: str, owner: str) -> None:
    """P6', P23: release the claim; if the store cannot even do that, its lease frees the key."""
    try:
        await ctx.lifespan_context.release(record_key(ctx, key), owner)
    except StoreUnavailable as error:
        log.warning("not released: key=%r is left to its lease (%s)", key, error)


async def run_once(ctx, call_next, key: str, fingerprint: bytes, owner: str) -> dict:
    """P4.1, P6', P7, P17, P18, P23: run the tool to completion and record its outcome with its side effect."""
    log.debug("claimed: key=%r tool=%s", key, ctx.params["name"])
    # P7: a cancel (the 2.x client sends one on a stdio timeout) or a vanished
    # client must not stop a keyed execution half way.
    with anyio.CancelScope(shield=True):
        try:
            outcome, recorded_now = await run_and_record(ctx, call_next, key, fingerprint)
        except MCPError as error:  # P6': -32042, sent as it is and not recorded
            await give_back(ctx, key, owner)
            log.debug("released: key=%r, the client is asked to send it again", key)
            raise error
        except StoreUnavailable as error:  # P23: nothing recorded; the client retries
            await give_back(ctx, key, owner)
            log.warning("store unavailable: key=%r, nothing recorded (%s)", key, error)
            raise rejection(STORE_UNAVAILABLE, key) from None
        except BaseException:
            # P6': nothing leaves the key claimed: what failed here was not
            # recorded, so a retry runs the tool as if this call never came.
            await give_back(ctx, key, owner)
            log.exception("released: key=%r, its outcome could not be recorded", key)
            raise internal_error() from None
    if not recorded_now:
        # P18: our lease passed, a retry took the key over and completed first, so
        # our charge was rolled back; this caller is told to come back for the outcome.
        log.debug("lease lost: key=%r, its charge rolled back", key)
        raise rejection(IN_PROGRESS, key)
    log.debug("recorded: key=%r", key)
    await anyio.lowlevel.checkpoint_if_cancelled()  # a cancel that came meanwhile, now the outcome is safe
    if isinstance(outcome, MCPError):
        raise outcome
    return outcome


def answer(held: Held, fingerprint: bytes, key: str, ctx) -> dict:
    """P4.2-P4.4: a record holds the key: conflict, in progress, or its replay."""
    if held.fingerprint != fingerprint:  # checked first, so a mismatch is a conflict even mid-run
        log.debug("conflict: key=%r tool=%s", key, ctx.params["name"])
        raise rejection(CONFLICT, key)
    if held.outcome is None:  # S1: reject at once, never wait
        log.debug("in progress: key=%r", key)
        raise rejection(IN_PROGRESS, key)
    log.debug("replayed: key=%r", key)
    return replay(held.outcome, ctx.protocol_version)


async def idempotent_tools_call(ctx, call_next) -> Any:
    """S0-S3: a tools/call, before any tool handler runs."""
    if not well_formed(ctx):
        return await call_next(ctx)  # the SDK's own error for malformed params; nothing runs
    key = key_of(ctx.params)
    if key is None:
        log.debug("no key: tool=%s", ctx.params["name"])
        return await call_next(ctx)  # exactly what the server did before
    fingerprint = sep3182.fingerprint(ctx.params["name"], ctx.params.get("arguments"))
    # P16: the store takes the key in one atomic step, or says which record holds it;
    # it reads first, so most retries (replay, conflict, in progress) take no lock.
    try:
        claim = await ctx.lifespan_context.claim(record_key(ctx, key), fingerprint)  # K2: this principal's key
    except StoreUnavailable as error:  # P23: nothing claimed, nothing ran
        log.warning("store unavailable: key=%r not claimed (%s)", key, error)
        raise rejection(STORE_UNAVAILABLE, key) from None
    if isinstance(claim, Won):
        return await run_once(ctx, call_next, key, fingerprint, claim.owner)
    if isinstance(claim, Full):  # P9: refuse rather than run without the guarantee
        log.debug("store full: key=%r", key)
        raise rejection(STORE_FULL, key)
    return answer(claim, fingerprint, key, ctx)


# ----------------------------------------------------------------------------
# 4. Whose key it is (K2, P10'', P21)
# ----------------------------------------------------------------------------

# K2 (P10''): without authorisation the deployment is one tenant (P10'); on stdio that
# tenant is the process's one client, and every process sharing its store file runs as
# one local user, who can read that file anyway.
ONE_TENANT = ("one tenant",)


def principal_of(ctx) -> tuple[str, ...]:
    """K2: the authorisation boundary of this request: the token's (issuer, subject), or the one tenant."""
    # The subject, not the client id or a session: a record belongs to whoever's
    # authority the call was made with. One user may call through several clients (an
    # IDE, a CLI), and retry through another after a crash; one client may act for many
    # users, who must not see each other's results. A session is gone in the stateless
    # 2026-07-28 revision, and a retry may well come on a new connection or instance.
    # `sub` is unique only within its issuer (RFC 7519), so the issuer is part of it.
    token = get_access_token()
    if token is not None:
        return token.claims["iss"], token.subject
    if settings.issuer is not None:  # fail closed: never let every caller share one tenant by accident
        raise RuntimeError("authorisation is on, but no access token reached the dispatch layer")
    return ONE_TENANT


def record_key(ctx, key: str) -> str:
    """K2, P21: the key as the store knows it: the principal's, so that no other principal's key can match it."""
    # A JSON array of strings: two different (principal, key) pairs never spell the same
    # text, and every store and instance takes it as it takes a key: no store change, no
    # extra round trip. Records of the previous version hold bare keys, which are not
    # JSON arrays unless a client sent one as its key: they match nothing, and expire (P8).
    return json.dumps([*principal_of(ctx), key])


# ----------------------------------------------------------------------------
# 5. The capability, the command line and the transports
# ----------------------------------------------------------------------------


def advertised(result: dict) -> dict:
    """P14 (C1, C2): capabilities.tools.idempotency = {}, an empty object, as the SEP defines it."""
    result.setdefault("capabilities", {}).setdefault("tools", {})["idempotency"] = {}
    return result


async def idempotency(ctx, call_next) -> Any:
    """The server middleware: it sees every message, as raw params, before any handler runs."""
    if ctx.request_id is None:
        return await call_next(ctx)  # a notification, even one named tools/call: nothing to answer or record
    if ctx.method == "tools/call":
        return await idempotent_tools_call(ctx, call_next)
    # P14: the 2.x SDK keeps no unknown capability, so it is added to the wire
    # result of server/discover (2026-07-28) and of initialize (the 2025 handshake).
    if ctx.method in ("server/discover", "initialize"):
        return advertised(await call_next(ctx))
    return await call_next(ctx)


# The 2.x SDK has server middleware: it sees the raw params, key included, before
# the params are validated and before any handler runs. That is the SEP's
# "dispatch layer", reached through a public hook, with no SDK code patched.
mcp.middleware.append(idempotency)


async def store_problem() -> str | None:
    """Open the store once before serving: a bad --store ends in one line, not a traceback."""
    try:
        async with shared_store(mcp):
            return None
    except Exception as error:  # an unknown scheme, a folder that is not there, a server that refuses
        return f"{type(error).__name__}: {error}".splitlines()[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: transport, store, windows, bound and the processor's delay."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio, or stateless Streamable HTTP with JSON responses (default: stdio)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP: the port (default: 8000); the path is /mcp")
    parser.add_argument("--store", default=STORE, metavar="URL",
                        help=f"memory, sqlite:PATH or postgresql://... (P15; default: {STORE})")
    parser.add_argument("--lease", type=sep3182.seconds, default=LEASE_SECONDS, metavar="SECONDS",
                        help="how long a claim is held before a retry may take it over (P18; default: 30)")
    sep3182.add_common_options(parser)
    oauth = parser.add_argument_group("authorisation (HTTP only): an OAuth 2.1 resource server; see sdk2/auth.py")
    oauth.add_argument("--issuer", metavar="URL",
                       help="the authorization server whose JWT access tokens are accepted (its `iss`); "
                            "without it, the server serves one tenant")
    oauth.add_argument("--jwks-uri", metavar="URL", help="the issuer's keys (default: from its RFC 8414 metadata)")
    oauth.add_argument("--resource", metavar="URL",
                       help="this server's URL, the `aud` its tokens must carry (default: http://HOST:PORT/mcp)")
    oauth.add_argument("--allow-unauthenticated", action="store_true",
                       help="listen on a non-loopback address without --issuer, on purpose: one tenant for all (P10')")
    args = parser.parse_args(argv)
    if args.issuer is not None and args.transport == "stdio":
        parser.error("--issuer needs --transport http: on stdio the boundary is the process (P10'')")
    args.resource = args.resource or f"http://{args.host}:{args.port}/mcp"
    return args


def unauthenticated_refusal() -> str | None:
    """P10': a reason not to serve one tenant on an address other machines reach; None if there is none."""
    if settings.transport == "stdio" or settings.issuer is not None or settings.allow_unauthenticated:
        return None
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:  # a host name
        loopback = settings.host == "localhost"
    return None if loopback else (
        f"refusing to listen on {settings.host} without authorisation: every client would share one key space "
        "and could replay another's results (K2); give --issuer URL, or --allow-unauthenticated to do it on purpose")


def tenancy() -> str:
    """K2, P10'': what the start-up line says the records are scoped to."""
    if settings.issuer is not None:
        return f"records scoped to each principal (issuer, subject) of tokens from {settings.issuer}, for {settings.resource}"
    if settings.transport == "stdio":
        return "serving one tenant: this process's one client (stdio, P10'')"
    return "serving one tenant: no authorisation, every client shares one key space (P10')"


def http_app():
    """The Streamable HTTP app; with --issuer, an OAuth resource server with per-tool scopes (sdk2/auth.py)."""
    if settings.issuer is not None:
        import auth  # only this mode needs joserfc (sdk2/requirements-auth.txt)
        from starlette.middleware import Middleware

        # MCPServer takes these two in its constructor, which runs at import, before the
        # command line is read: they are the attributes it keeps them in.
        mcp.settings.auth = auth.auth_settings(settings.issuer, settings.resource)
        mcp._token_verifier = auth.JwtVerifier(settings.issuer, settings.resource, settings.jwks_uri)
    app = mcp.streamable_http_app(stateless_http=True, json_response=True, host=settings.host)
    if settings.issuer is not None:
        # Innermost, after the SDK's authentication: the verified token is known, no handler has run.
        app.user_middleware.append(Middleware(auth.ScopeGate, scopes=TOOL_SCOPES, resource=settings.resource))
        auth.listing_scopes(app, mcp.settings.auth, sorted(set(TOOL_SCOPES.values())))
    return app


def main() -> None:
    """Check the SDK, then serve; stdout carries the protocol on stdio, so every log goes to stderr."""
    global settings
    settings = parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s", force=True)
    log.setLevel(logging.DEBUG if settings.verbose else logging.INFO)
    # P12': a build that hides the key would let this server look idempotent while
    # it deduplicates nothing. Probed, not assumed, before anything is served.
    why = sdk_hides_the_key()
    if why is not None:
        sys.exit(SDK_HIDES_KEY.format(version=version("mcp"), why=why))
    refusal = unauthenticated_refusal()
    if refusal is not None:
        sys.exit(refusal)
    problem = anyio.run(store_problem)
    if problem is not None:
        sys.exit(f"cannot open the store {settings.store}: {problem}")
    where = "stdio" if settings.transport == "stdio" else f"http://{settings.host}:{settings.port}/mcp"
    log.info("serving on %s: store %s, retention %gs, lease %gs, at most %d records, charge delay %gs",
             where, settings.store, settings.retention, settings.lease, settings.max_records, settings.charge_delay)
    log.info("%s", tenancy())
    if settings.transport == "stdio":
        mcp.run()
    else:
        import uvicorn

        uvicorn.run(http_app(), host=settings.host, port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
