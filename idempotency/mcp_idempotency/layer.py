"""SEP-3182's dispatch layer for any MCPServer on mcp 2.x, added in one line.

    keys = Idempotency("sqlite:notes.db", server_info={"name": "notes", "version": "1.0"})
    mcp = MCPServer("notes", lifespan=keys.lifespan, middleware=[keys])

The layer is a server middleware, the SDK's public hook that sees every message as
raw params before any handler runs, and the wire result of `server/discover`, where
the capability is added (no server API declares it). The SDK's `Extension` hook
would serve for tools/call with one validation instead of two: its
`intercept_tool_call` gets typed params without the key, but `ctx.params` keeps
the raw `idempotencyKey`. `lifespan` probes the SDK and opens the store.

Read it top to bottom, in the order of the SEP: read the key (P1, P2), fingerprint
the request (P3), claim the key (P16), then conflict, in progress, replay (P4,
P20), or run the tool and record its outcome in one unit of work with its side
effect (P6', P7, P17, P18, P23). A tool whose effect lives in the same store joins
that unit of work through `keys.transaction()`; one whose effect is elsewhere (an
e-mail) needs nothing, with S4's caveat: a crash between the effect and the
record lets the retry send it again.

Ids such as S1 (a rule of SEP-3182, as this project lists them) and P9 (a position
it takes where the SEP is silent) are this project's: the SEP numbers nothing;
tests/CONFORMANCE.md lists both.
"""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.shared.exceptions import MCPError
from mcp_types.methods import is_input_required, serialize_server_result, validate_client_request
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import from_json, to_json

from . import rules
from .probe import why_the_key_is_hidden
from .rules import CONFLICT, IN_PROGRESS, INVALID_KEY, STORE_FULL, STORE_UNAVAILABLE, Placement
from .stores import Full, Held, Limits, Store, StoreUnavailable, UnitOfWork, Won, checked_url, open_store

log = logging.getLogger("idempotency")

NOT_OPEN = "the idempotency store was never opened: pass lifespan=keys.lifespan to MCPServer"

SHARED_KEY_SPACE = (
    "served over HTTP without authorisation: every caller shares one key space, so a key one client sends "
    "replays another's result; pass principal=token_principal behind OAuth to give each principal its own"
)

Outcome = dict[str, Any] | MCPError  # what a tools/call produced: a result, or a JSON-RPC error
CallNext = Callable[[Any], Awaitable[Any]]

# ----------------------------------------------------------------------------
# Whose key it is (K2, P10'', P21): the principal a record is scoped to
# ----------------------------------------------------------------------------

Principal = tuple[str, ...]

# K2 (P10''): without authorisation the deployment is one tenant (P10'); on stdio that
# tenant is the process's one client, and every process sharing its store file runs as
# one local user, who can read that file anyway.
ONE_TENANT: Principal = ("one tenant",)


def one_tenant() -> Principal:
    """K2 without authorisation: every caller is the one tenant (P10')."""
    return ONE_TENANT


def token_principal() -> Principal:
    """K2 with OAuth: the verified access token's (issuer, subject); no token is an error, never a tenant."""
    # The subject, not the client id or a session: a record belongs to whoever's
    # authority the call was made with. One user may call through several clients (an
    # IDE, a CLI), and retry through another after a crash; one client may act for many
    # users, who must not see each other's results. A session is gone in the stateless
    # 2026-07-28 revision, and a retry may well come on a new connection or instance.
    # `sub` is unique only within its issuer (RFC 7519), so the issuer is part of it.
    token = get_access_token()
    if token is None or token.claims is None or token.subject is None:  # fail closed, never one tenant by accident
        raise RuntimeError("authorisation is on, but no verified access token reached the dispatch layer")
    return str(token.claims["iss"]), token.subject


# ----------------------------------------------------------------------------
# Rejections and recorded outcomes, as the wire carries them
# ----------------------------------------------------------------------------


def rejection(kind: str, key: str | None = None, detail: str | None = None) -> MCPError:
    """P5: the JSON-RPC error for an idempotency rejection; never recorded (P6)."""
    return MCPError(**rules.rejection(kind, key, detail))


def internal_error() -> MCPError:
    """P6': what anything unexpected becomes: a fixed message, no exception text leaked to the client."""
    return MCPError(**rules.INTERNAL_ERROR)


def well_formed(ctx: Any) -> bool:
    """Would the SDK accept these tools/call params? If not, it answers them itself and nothing runs."""
    try:
        validate_client_request("tools/call", ctx.protocol_version, ctx.params)
        return True
    except (ValidationError, KeyError, ValueError):
        return False


def recorded(outcome: Outcome, revision: str) -> str:
    """P6: an outcome as the store keeps it: a result with the revision it was shaped for, or an error."""
    if isinstance(outcome, MCPError):
        return to_json({"error": outcome.error.model_dump(exclude_none=True)}).decode()
    return to_json({"revision": revision, "result": outcome}).decode()


def recorded_as(outcome: Outcome, key: str, revision: str) -> tuple[Outcome, str]:
    """P6': the outcome and its text for the store; an outcome that cannot be written down is an internal error."""
    try:
        return outcome, recorded(outcome, revision)
    except Exception:
        log.exception("internal error: key=%r, its outcome cannot be recorded", key)
        return internal_error(), recorded(internal_error(), revision)


class AsksAgain(Exception):
    """P6', P25: an outcome that asks the client to send the request again; kept, it would answer that
    request for the whole window, so it is never recorded and the claim is given back."""

    def __init__(self, outcome: Outcome):
        super().__init__("the outcome asks for the request again")
        self.outcome = outcome


def asks_again(outcome: Outcome) -> bool:
    """-32042 URL elicitation required (2025-11-25) or an InputRequiredResult (2026-07-28, either form)."""
    if isinstance(outcome, MCPError):
        return outcome.error.code == rules.URL_ELICITATION_REQUIRED
    return is_input_required(outcome)


async def outcome_of(ctx: Any, call_next: CallNext, key: str) -> Outcome:
    """P6': whatever the SDK's tools/call handler produces, a result or a JSON-RPC error; an
    internal error when something unexpected escapes it, so the key never stays running."""
    try:
        result: dict[str, Any] = await call_next(ctx)
        return result
    except MCPError as error:
        return error
    except Exception:
        log.exception("internal error: key=%r tool=%s", key, ctx.params["name"])  # the traceback, to stderr
        return internal_error()


# ----------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------


class Idempotency:
    """SEP-3182 for one MCPServer: `lifespan=keys.lifespan, middleware=[keys]`.

    Everything it needs is passed in: the store's URL (memory, sqlite:PATH or
    postgresql://...), its limits (retention P8, lease P18, bound P9, key length P2), the server's
    info (stamped on a replay shaped for 2026-07-28, P20), how to find the
    principal of a request (K2), where the key and the capability are (P26), and
    the tools' own tables (schema statements the store runs as it opens: open_store).
    A subclass may change one decision by overriding the method that makes it;
    tests/stand_ins/ do, to break one rule each.
    """

    def __init__(
        self,
        store: str,
        *,
        server_info: Mapping[str, str],
        limits: Limits = Limits(),
        principal: Callable[[], Principal] = one_tenant,
        placement: Placement = Placement.PARAMS,
        tables: Sequence[str] = (),
    ):
        self.store_url, self.limits, self.principal = checked_url(store), limits, principal  # a bad URL fails here
        self.tables = tuple(tables)  # the tools' own schema statements, made as the store opens (open_store)
        self.placement = placement  # P26: it decides only where the key is read and the capability written
        self.server_info = dict(server_info)
        self._store: Store | None = None
        self.shared_key_space_told = False  # said once: over HTTP without authorisation, one key space

    # -- the store, open while the server runs -------------------------------

    @asynccontextmanager
    async def lifespan(self, _server: Any) -> AsyncIterator["Idempotency"]:
        """P12', P15: refuse to serve on an SDK that hides the key; then the store, open while the server runs."""
        refusal = await why_the_key_is_hidden()  # probed, not assumed: else the server looks idempotent and is not
        if refusal is not None:
            log.error("%s", refusal)
            raise RuntimeError(refusal)
        async with open_store(self.store_url, self.limits, self.tables) as store:
            self._store = store
            try:
                yield self
            finally:
                self._store = None

    @property
    def store(self) -> Store:
        """The open store; only while the server runs."""
        if self._store is None:
            raise RuntimeError(NOT_OPEN)
        return self._store

    def refuse_unless_open(self) -> None:
        """Fail the handshake, before any capability is advertised, when the store was never opened."""
        # The SDK gives the layer no start hook of its own: the handshake is the first moment it
        # runs, and a client told the server is idempotent would retry on a server that cannot be.
        if self._store is None:
            log.error("%s", NOT_OPEN)
            raise MCPError(code=rules.INTERNAL_ERROR["code"], message=NOT_OPEN)

    def transaction(self) -> UnitOfWork:
        """P17: a tool's unit of work in the store; under a keyed call it joins the layer's, as a savepoint."""
        return self.store.transaction()

    # -- the middleware --------------------------------------------------------

    async def __call__(self, ctx: Any, call_next: CallNext) -> Any:
        """The server middleware: it sees every message, as raw params, before any handler runs."""
        if ctx.request_id is None:
            return await call_next(ctx)  # a notification, even one named tools/call: nothing to answer or record
        if ctx.request is not None and self.principal is one_tenant and not self.shared_key_space_told:
            self.shared_key_space_told = True  # K2: the operator learns it once, not per request
            log.warning(SHARED_KEY_SPACE)
        if ctx.method == "tools/call":
            return await self.tools_call(ctx, call_next)
        # P14: the 2.x SDK keeps no unknown capability, so it is added to the wire
        # result of server/discover (2026-07-28) and of initialize (the 2025 handshake).
        if ctx.method in ("server/discover", "initialize"):
            self.refuse_unless_open()
            return self.advertised(await call_next(ctx))
        return await call_next(ctx)

    def advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        """P14, P11', P26: the capability where the placement puts it, with the key length and window."""
        settings = rules.capability(self.limits.max_key_length, self.limits.retention)
        rules.advertise(result.setdefault("capabilities", {}), self.placement, settings)
        return result

    def key_of(self, params: Mapping[str, Any]) -> str | None:
        """P1, P2, P26: the request's key where the placement reads it, or None when it carries none there."""
        # P1: only the placement's own member counts (the sibling of `name` and `arguments`,
        # or the extension's _meta key); a field of the same name anywhere else, in
        # `arguments` or in the other placement, is the tool's business, not a key.
        try:
            return rules.checked_key(rules.sent_key(params, self.placement), self.limits.max_key_length)
        except rules.InvalidKey as bad:
            log.debug("invalid key: %s", bad)
            raise rejection(INVALID_KEY, None, str(bad)) from None

    async def tools_call(self, ctx: Any, call_next: CallNext) -> Any:
        """S0-S3: a tools/call, before any tool handler runs."""
        # The SDK validates the params inside call_next, before any handler runs, and
        # answers malformed ones itself. A call without a key is the SDK's alone, so it
        # is validated there, once; a keyed one is checked here first (well_formed), so
        # that malformed params never claim a key nor get a rejection or a replay.
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        try:
            key = self.key_of(params)
        except MCPError:
            if well_formed(ctx):
                raise
            return await call_next(ctx)  # the SDK's own error for malformed params; nothing runs
        if key is None:
            log.debug("no key: tool=%s", params.get("name"))
            return await call_next(ctx)  # exactly what the server did before
        if not well_formed(ctx):
            return await call_next(ctx)  # the SDK's own error for malformed params; nothing runs
        fingerprint = rules.fingerprint(ctx.params["name"], ctx.params.get("arguments"))
        principal = self.principal()  # K2: whose call this is, found once
        store_key = self.store_key(principal, key)
        # P16: the store takes the key in one atomic step, or says which record holds it;
        # it reads first, so most retries (replay, conflict, in progress) take no lock.
        try:
            claim = await self.store.claim(store_key, fingerprint, self.share_of(principal))
        except StoreUnavailable as error:  # P23: nothing claimed, nothing ran
            log.warning("store unavailable: key=%r not claimed (%s)", key, error)
            raise rejection(STORE_UNAVAILABLE, key) from None
        if isinstance(claim, Won):
            return await self.run_once(ctx, call_next, key, store_key, fingerprint, claim.owner)
        if isinstance(claim, Full):  # P9, P9': refuse rather than run without the guarantee
            log.debug("store full: key=%r", key)
            raise rejection(STORE_FULL, key)
        return self.answer(claim, fingerprint, key, ctx)

    def store_key(self, principal: Principal, key: str) -> str:
        """K2, P21: the key as the store knows it: the principal's, so that no other principal's key can match it."""
        return rules.scoped_key(principal, key)

    def share_of(self, principal: Principal) -> str:
        """P9': whose share of the store a new record counts against: the principal's own, so that one
        principal filling its share leaves every other principal's answers as they were (P21)."""
        return rules.principal_name(principal)

    # -- P4.2-P4.4: a record holds the key ------------------------------------

    def answer(self, held: Held, fingerprint: bytes, key: str, ctx: Any) -> dict[str, Any]:
        """P4.2-P4.4: a record holds the key: conflict, in progress, or its replay."""
        if held.fingerprint != fingerprint:  # checked first, so a mismatch is a conflict even mid-run
            log.debug("conflict: key=%r tool=%s", key, ctx.params["name"])
            raise rejection(CONFLICT, key)
        if held.outcome is None:  # S1: reject at once, never wait
            log.debug("in progress: key=%r", key)
            raise rejection(IN_PROGRESS, key)
        log.debug("replayed: key=%r", key)
        return self.replay(held.outcome, ctx.protocol_version)

    def replay(self, outcome: str, revision: str) -> dict[str, Any]:
        """P4.4 (S2): answer with the recorded outcome; the tool does not run."""
        kept = from_json(outcome)
        if "error" in kept:
            raise MCPError(**kept["error"])
        return self.shaped_for(kept["result"], kept["revision"], revision)

    def shaped_for(self, result: dict[str, Any], recorded_for: str, revision: str) -> dict[str, Any]:
        """P20: a recorded result in the shape of the revision the retry speaks."""
        if revision == recorded_for:
            return result  # byte for byte (P6)
        # 2026-07-28 results carry resultType and a serverInfo stamp in _meta that the
        # 2025 handshake revisions do not define, and a 2026 client requires them.
        result = dict(result)
        meta = {
            name: value for name, value in result.pop("_meta", {}).items() if name != mcp_types.SERVER_INFO_META_KEY
        }
        result.pop("resultType", None)
        if revision in MODERN_PROTOCOL_VERSIONS:
            result["resultType"] = "complete"
            meta[mcp_types.SERVER_INFO_META_KEY] = dict(self.server_info)
        if meta:
            result["_meta"] = meta
        shaped: dict[str, Any] = serialize_server_result("tools/call", revision, result)
        return shaped

    # -- P4.1: the key is ours: run the tool once, and record what it produced --

    async def run_once(
        self, ctx: Any, call_next: CallNext, key: str, store_key: str, fingerprint: bytes, owner: str
    ) -> dict[str, Any]:
        """P4.1, P6', P7, P17, P18, P23: run the tool to completion and record its outcome with its side effect."""
        log.debug("claimed: key=%r tool=%s", key, ctx.params["name"])
        with self.run_scope():
            try:
                outcome, recorded_now = await self.run_and_record(ctx, call_next, key, store_key, fingerprint)
            except AsksAgain as asked:  # P6', P25: sent as it is, not recorded: the next leg claims the key
                await self.give_back(key, store_key, owner)
                log.debug("released: key=%r, the client is asked to send it again", key)
                if isinstance(asked.outcome, MCPError):
                    raise asked.outcome from None
                return asked.outcome
            except StoreUnavailable as error:  # P23: nothing recorded; the client retries
                await self.give_back(key, store_key, owner)
                log.warning("store unavailable: key=%r, nothing recorded (%s)", key, error)
                raise rejection(STORE_UNAVAILABLE, key) from None
            except BaseException:
                # P6': nothing leaves the key claimed: what failed here was not
                # recorded, so a retry runs the tool as if this call never came.
                await self.give_back(key, store_key, owner)
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

    def run_scope(self) -> anyio.CancelScope:
        """P7: the scope a keyed run runs in: shielded, so that it runs to completion and is recorded."""
        # A cancel (the 2.x client sends one on a stdio timeout), a closed SSE response
        # stream (2026-07-28 makes that a cancel) or a vanished client must not stop a
        # keyed execution half way: its retry would find the key released, or held.
        return anyio.CancelScope(shield=True)

    def never_kept(self, outcome: Outcome) -> bool:
        """P6', P25: is this an outcome that asks for the request again (-32042, input required), never recorded?"""
        return asks_again(outcome)

    async def run_and_record(
        self, ctx: Any, call_next: CallNext, key: str, store_key: str, fingerprint: bytes
    ) -> tuple[Outcome, bool]:
        """P17, P18: run the tool and complete its record in one unit of work: (the outcome, recorded or fenced)."""
        # P17: the tool's own writes to the store join this unit of work, so the charge
        # and the completed record commit together or not at all.
        async with self.store.transaction() as tx:
            outcome = await outcome_of(ctx, call_next, key)
            if tx.failure is not None:
                # P23: the store failed under the tool (the SDK made that an isError
                # result): that is no outcome of the tool's, and nothing is recorded.
                raise StoreUnavailable("the unit of work failed") from tx.failure
            if self.never_kept(outcome):
                raise AsksAgain(outcome)  # rolls the unit of work back; run_once gives the key back
            outcome, text = recorded_as(outcome, key, ctx.protocol_version)
            # P18: sent with the commit, which happens once, as the unit of work ends: the
            # first completion of the key wins; a later one rolls back with everything it did.
            tx.complete(store_key, fingerprint, text)
        return outcome, tx.completed

    async def give_back(self, key: str, store_key: str, owner: str) -> None:
        """P6', P23: release the claim; if the store cannot even do that, its lease frees the key."""
        try:
            await self.store.release(store_key, owner)
        except StoreUnavailable as error:
            log.warning("not released: key=%r is left to its lease (%s)", key, error)
