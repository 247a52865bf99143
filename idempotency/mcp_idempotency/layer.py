"""SEP-3182's dispatch layer for any MCPServer on mcp 2.x, an SDK `Extension`.

    keys = Idempotency("sqlite:notes.db")
    mcp = MCPServer("notes", extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan)

The layer is the SDK's `Extension` hook for tools/call: `intercept_tool_call` runs after
the SDK has validated the request, once, and before any tool; its `ctx.params` holds the
key where the placement puts it (the extension's `_meta` key by default, the raw field the
typed params drop, or a marked argument). What it returns, a replay included, the SDK
shapes for the client's revision. The middleware `keys.advertise` writes the capability
into the handshake's result; `keys.lifespan` probes the SDK and keeps the store open.

Read it top to bottom, in the order of the SEP: read the key, fingerprint
the request, claim the key, then conflict, in progress, replay, or run the tool and
record its outcome in one unit of work with its side effect, the claim's lease renewed
for as long as the tool runs, so a retry never takes over a live run, until the run's
deadline (keyed_run.py). A tool whose effect
lives in the same store joins that unit of work through `keys.transaction()`;
one whose effect is elsewhere (an e-mail) forwards `keys.downstream_key()` to the
API that makes it, or else a crash between the effect and the record lets the retry
send it again.

It is configured by its constructor's arguments alone. Its public members are the three
the server is built with (the layer itself, `advertise`, `lifespan`), `check()` for its
main to call before serving, the two a tool uses (`transaction()`, `downstream_key()`),
`key_argument()` for the argument placement, and what it was given (`limits`,
`placement`, `principal`); the SDK calls `settings` and `intercept_tool_call`, the
algorithm itself. Each decision the algorithm makes is one private method (`_key_of`,
`_fingerprint`, `_store_key`, `_share_of`, `_answer`, `_never_kept`, `_keyed_run`,
`_run_once`, `_advertised`), so the rules read one at a time; they are not an interface
and may change.
"""

import contextvars
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import mcp_types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types.methods import is_input_required
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field
from pydantic_core import from_json

from . import rules, stores
from .errors import InvalidSetting, ServerMisconfigured
from .keyed_run import KeyedRun, Runs, Work, runs_kept
from .outcomes import AsksAgain, Outcome, internal_error, recorded, rejection
from .probe import sdk_hides_the_key, why_the_key_is_hidden
from .rules import CONFLICT, IN_PROGRESS, INVALID_KEY, STORE_FULL, STORE_UNAVAILABLE, Placement
from .stores import Full, Held, Limits, Store, StoreUnavailable, UnitOfWork, Won, checked_url, open_store

__all__ = ["Idempotency", "Principal", "one_tenant", "token_principal"]

log = logging.getLogger("idempotency")

NOT_OPEN = "the idempotency store was never opened: pass lifespan=keys.lifespan to MCPServer"
NOT_ADVERTISED = "the idempotency capability is never advertised: pass middleware=[keys.advertise] to MCPServer"
NOT_INSTALLED = "the idempotency layer never sees a tools/call: pass extensions=[keys] to MCPServer"

SHARED_KEY_SPACE = (
    "served over HTTP without authorisation: every caller shares one key space, so a key one client sends "
    "replays another's result; pass principal=token_principal behind OAuth to give each principal its own"
)

Context = ServerRequestContext[Any, Any]

# The keyed call a tool runs for (its store key and fingerprint), from which Idempotency.downstream_key
# derives its downstream key when the tool asks: most tools never do, and pay nothing for it.
_keyed_call: contextvars.ContextVar[tuple[str, bytes] | None] = contextvars.ContextVar("keyed_call", default=None)

# ----------------------------------------------------------------------------
# Whose key it is: the principal a record is scoped to
# ----------------------------------------------------------------------------

Principal = tuple[str, ...]

# Without authorisation the deployment is one tenant; on stdio that
# tenant is the process's one client, and every process sharing its store file runs as
# one local user, who can read that file anyway.
ONE_TENANT: Principal = ("one tenant",)


def one_tenant() -> Principal:
    """Without authorisation, every caller is the one tenant."""
    return ONE_TENANT


def token_principal() -> Principal:
    """With OAuth, the verified access token's (issuer, subject); no token is an error, never a tenant."""
    # The subject, not the client id or a session: a record belongs to whoever's authority the
    # call was made with. One user may retry through another client; one client may act for many
    # users; a session is gone in 2026-07-28, and a retry may come on another instance. `sub` is
    # unique only within its issuer (RFC 7519), so the issuer is part of it.
    token = get_access_token()
    if token is None or token.claims is None or token.subject is None:  # fail closed, never one tenant by accident
        raise ServerMisconfigured("authorisation is on, but no verified access token reached the dispatch layer")
    return str(token.claims["iss"]), token.subject


# ----------------------------------------------------------------------------
# Rejections and recorded outcomes
# ----------------------------------------------------------------------------


def as_mapping(result: HandlerResult) -> dict[str, Any]:
    """A handler's result as the SDK dumps it for the wire, before it shapes it for a revision."""
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result or {})


def recorded_as(outcome: Outcome, key: str, declared: Mapping[str, Any]) -> tuple[Outcome, str]:
    """The outcome and its text for the store; an outcome that cannot be written down is an internal error."""
    try:
        return outcome, recorded(outcome, declared)
    except Exception:
        log.exception("internal error: key=%r, its outcome cannot be recorded", key)
        return internal_error(), recorded(internal_error())


def acknowledged(outcome: Outcome, key: str) -> Outcome:
    """A result of a claimed keyed call, its _meta saying which key was honoured (beside any _meta of the
    tool's); recorded so, every replay carries it as the first answer did. An error is left as it is."""
    if isinstance(outcome, MCPError):
        return outcome
    return {**outcome, "_meta": {**outcome.get("_meta", {}), rules.ACKNOWLEDGEMENT: rules.acknowledgement(key)}}


def as_recorded_then(kept: dict[str, Any]) -> dict[str, Any]:
    """A result recorded by an earlier version, shaped for its revision then: as a handler returns it now."""
    # A handler's result names its type, which a 2025 shape left out; and the SDK stamps every
    # 2026-07-28 result with this server's info, so a stamp kept from then is taken off.
    result = {"resultType": "complete", **kept["result"]}
    meta = {name: value for name, value in result.pop("_meta", {}).items() if name != mcp_types.SERVER_INFO_META_KEY}
    return {**result, "_meta": meta} if meta else result


def expressible(result: Mapping[str, Any], revision: str) -> bool:
    """Has this revision a shape for the recorded result? A result of an extension's type (a task) has none
    before 2026-07-28."""
    return revision in MODERN_PROTOCOL_VERSIONS or result.get("resultType") in (None, "complete")


def asks_again(outcome: Outcome) -> bool:
    """-32042 URL elicitation required (2025-11-25) or an InputRequiredResult (2026-07-28, either form)."""
    if isinstance(outcome, MCPError):
        return outcome.error.code == rules.URL_ELICITATION_REQUIRED
    return is_input_required(outcome)


async def outcome_of(ctx: Context, call_next: CallNext, key: str) -> Outcome:
    """Whatever the SDK's tools/call handler produces, a result or a JSON-RPC error; an
    internal error when something unexpected escapes it, so the key never stays running."""
    try:
        return as_mapping(await call_next(ctx))
    except MCPError as error:
        return error
    except Exception:
        log.exception("internal error: key=%r tool=%s", key, (ctx.params or {}).get("name"))  # to stderr
        return internal_error()


def checked_deadlines(deadlines: Mapping[str, float]) -> dict[str, float]:
    """Each tool's own deadline, in seconds, finite and above zero; any other is refused at construction."""
    for tool, seconds in deadlines.items():
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
            raise InvalidSetting(f"deadlines[{tool!r}]={seconds!r}: a deadline must be a finite number above zero")
    return dict(deadlines)


# ----------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------


class Idempotency(Extension):
    """SEP-3182 for one MCPServer: `extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan`.

    Everything it needs is passed in: the store's URL (memory, sqlite:PATH or
    postgresql://...), its limits (retention, lease, bound, key length, the deadline of a
    keyed run), how to find the principal of a request, where the key and
    the capability are, the tools' own tables (schema statements the store runs as it
    opens: open_store), and the tools whose keyed runs have a deadline of their own.
    """

    identifier = rules.EXTENSION_ID  # advertised under capabilities.extensions only with the key in _meta

    def __init__(
        self,
        store: str,
        *,
        limits: Limits = Limits(),
        principal: Callable[[], Principal] = one_tenant,
        placement: Placement = rules.DEFAULT_PLACEMENT,
        tables: Sequence[str] = (),
        deadlines: Mapping[str, float] = {},
    ):
        self._store_url, self.limits, self.principal = checked_url(store), limits, principal  # a bad URL fails here
        self._deadlines = checked_deadlines(deadlines)  # a tool's own deadline, in place of limits.deadline
        self._tables = tuple(tables)  # the tools' own schema statements, made as the store opens (open_store)
        self.placement = placement  # it decides only where the key is read and the capability written
        self._opened: Store | None = None
        self._key_arguments: dict[str, str] = {}  # argument placement: each marked tool's key property
        self._running: Runs | None = None  # every keyed run, while the server runs
        self._applied = False  # by an MCPServer, given extensions=[keys]
        self._shared_key_space_told = False  # said once: over HTTP without authorisation, one key space

    # -- the store, open while the server runs -------------------------------

    @asynccontextmanager
    async def lifespan(self, server: MCPServer[Any]) -> AsyncIterator["Idempotency"]:
        """Refuse to serve on an SDK that hides the key, or unwired; then the store, open while it runs."""
        refusal = await why_the_key_is_hidden()  # probed, not assumed: else the server looks idempotent and is not
        if refusal is None and not self._applied:
            refusal = NOT_INSTALLED  # the capability would be advertised, and no key ever read
        if refusal is None and self.advertise not in server.middleware:
            refusal = NOT_ADVERTISED  # clients would never learn that they may send keys
        if refusal is not None:
            log.error("%s", refusal)
            raise ServerMisconfigured(refusal)
        # Which tools take a key, and in which argument, read from the tool list once, as the server starts.
        tools = await server.list_tools() if self.placement is Placement.ARGUMENT or self._deadlines else []
        self._key_arguments = {tool.name: name for tool in tools if (name := rules.marked_argument(tool.input_schema))}
        unknown = sorted(set(self._deadlines) - {tool.name for tool in tools})
        if unknown:  # a typo would leave that tool on the server's deadline, unnoticed
            refusal = f"deadlines= names no tool of this server: {', '.join(unknown)}; name the tools as listed"
            log.error("%s", refusal)
            raise ServerMisconfigured(refusal)
        # The runs end before the store closes under them, and a run may use the store until it ends.
        try:
            async with self._opened_store() as store, runs_kept(self.limits.lease) as runs:
                self._opened, self._running = store, runs
                yield self
        finally:
            self._opened, self._running = None, None

    @asynccontextmanager
    async def _opened_store(self) -> AsyncIterator[Store]:
        """The store, open while the server runs; one that cannot open as configured is logged first, in one line."""
        try:
            async with open_store(self._store_url, self.limits, self._tables) as store:
                yield store
        except stores.Misconfigured as refusal:
            log.error("%s", self._cannot_open(refusal))
            raise

    def _cannot_open(self, refusal: stores.Misconfigured) -> str:
        """The one line a store that cannot open as configured is told in: what, and the fix."""
        return f"cannot open the store {stores.shown(self._store_url)}: {refusal}"

    def check(self) -> None:
        """From a server's main, before it serves: the SDK shows the layer the key, and the store opens as
        configured with the tools' tables; else the process ends here in the one line that names the fix,
        rather than in the SDK's traceback from the lifespan, which refuses the same."""
        refusal = sdk_hides_the_key() or anyio.run(self._store_refusal)
        if refusal is not None:
            raise SystemExit(refusal)

    async def _store_refusal(self) -> str | None:
        """Why the store cannot open as configured, in one line; None if it opens."""
        try:
            async with open_store(self._store_url, self.limits, self._tables):
                return None
        except stores.Misconfigured as refusal:
            return self._cannot_open(refusal)

    @property
    def _store(self) -> Store:
        """The open store; only while the server runs."""
        if self._opened is None:
            raise ServerMisconfigured(NOT_OPEN)
        return self._opened

    @property
    def _runs(self) -> Runs:
        """The keyed runs under way; only while the server runs."""
        if self._running is None:
            raise ServerMisconfigured(NOT_OPEN)
        return self._running

    def transaction(self) -> UnitOfWork:
        """A tool's unit of work in the store; under a keyed call it joins the layer's, as a savepoint."""
        return self._store.transaction()

    def key_argument(self) -> Any:
        """A tool's key parameter's annotation, marked, as long as keys here: `k: keys.key_argument() = None`."""
        marked = Field(max_length=self.limits.max_key_length, json_schema_extra={rules.ARGUMENT_MARK: True})
        return Annotated[str | None, marked]

    def downstream_key(self) -> str | None:
        """In a tool run for a keyed call, the key to forward to the API its effect lives in (its
        Idempotency-Key header): the same for every retry of the call, on every instance. None without a key."""
        # The one run a retry can repeat is a takeover of a holder that died or froze after
        # its effect; an API that deduplicates on this key then makes that effect once.
        keyed_call = _keyed_call.get()
        return None if keyed_call is None else rules.downstream_key(*keyed_call)

    # -- the capability, which no server API declares ---------------------

    async def advertise(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """The server middleware that writes the capability into server/discover (2026-07-28) and initialize (2025)."""
        if ctx.request is not None and self.principal is one_tenant and not self._shared_key_space_told:
            self._shared_key_space_told = True  # the operator learns it once, at the first request over HTTP
            log.warning(SHARED_KEY_SPACE)
        if ctx.request_id is None or ctx.method not in ("server/discover", "initialize"):
            return await call_next(ctx)
        # Checked at the handshake, before any capability is advertised: a client told the server
        # is idempotent would retry on a server that cannot be.
        if self._opened is None:
            log.error("%s", NOT_OPEN)
            raise MCPError(code=rules.INTERNAL_ERROR["code"], message=NOT_OPEN)
        result = as_mapping(await call_next(ctx))
        extensions = result.setdefault("capabilities", {}).get("extensions")
        if self.placement is not Placement.META and extensions:  # the field, an argument: no protocol extension
            result["capabilities"]["extensions"] = {
                name: value for name, value in extensions.items() if name != rules.EXTENSION_ID
            }
        return self._advertised(result)

    def _advertised(self, result: dict[str, Any]) -> dict[str, Any]:
        """The capability where the placement puts it, with the key length and window."""
        rules.advertise(result.setdefault("capabilities", {}), self.placement, self._capability())
        return result

    def _capability(self) -> dict[str, Any]:
        """The longest key taken, the window, the longest deadline of any tool and the lease, in seconds."""
        deadline = max([self.limits.deadline, *self._deadlines.values()])
        return rules.capability(self.limits.max_key_length, self.limits.retention, deadline, self.limits.lease)

    def settings(self) -> dict[str, Any]:
        """SEP-2133: what the SDK advertises under capabilities.extensions (on 2026-07-28), asked as it applies us."""
        self._applied = True  # the SDK applies each extension as it builds the MCPServer: lifespan checks it did
        return self._capability()

    # -- a tools/call, before any tool runs -------------------------------------

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        """The SDK validated the request; read its key from the raw params, then claim, answer or run."""
        sent = dict(ctx.params or {})  # the raw params: the typed `params` have no idempotencyKey
        key = self._key_of(sent)
        if key is None:
            log.debug("no key: tool=%s", params.name)
            return await call_next(ctx)  # exactly what the server did before
        fingerprint = self._fingerprint(sent)
        principal = self.principal()  # whose call this is, found once
        store_key = self._store_key(principal, key)
        # The store takes the key in one atomic step, or says which record holds it;
        # it reads first, so most retries (replay, conflict, in progress) take no lock.
        try:
            claim = await self._store.claim(store_key, fingerprint, self._share_of(principal))
        except StoreUnavailable as error:  # nothing claimed, nothing ran
            log.warning("store unavailable: key=%r not claimed (%s)", key, error)
            raise rejection(STORE_UNAVAILABLE, key) from None
        if isinstance(claim, Won):
            log.debug("claimed: key=%r tool=%s", key, params.name)
            run = self._keyed_run(key, store_key, fingerprint, claim.owner, params.name)
            outcome = await self._run_once(
                run, lambda: self._run_and_record(ctx, call_next, key, store_key, fingerprint)
            )
            if isinstance(outcome, MCPError):
                raise outcome
            return outcome
        if isinstance(claim, Full):  # refuse rather than run without the guarantee
            log.debug("store full: key=%r", key)
            raise rejection(STORE_FULL, key)
        return self._answer(claim, fingerprint, key, ctx)

    def _key_of(self, params: Mapping[str, Any]) -> str | None:
        """The request's key where the placement reads it, or None when it carries none there."""
        # Only the placement's own member counts (the sibling of `name` and `arguments`, the extension's
        # _meta key, or the tool's marked argument); one anywhere else is the tool's business, not a key.
        try:
            sent = rules.sent_key(params, self.placement, self._key_arguments.get(params.get("name", "")))
            return rules.checked_key(sent, self.limits.max_key_length)
        except rules.InvalidKey as bad:
            log.debug("invalid key: %s", bad)
            raise rejection(INVALID_KEY, None, str(bad)) from None

    def _fingerprint(self, params: Mapping[str, Any]) -> bytes:
        """The tool's name and its arguments as JSON values; _meta and the key play no part."""
        return rules.fingerprint(params["name"], params.get("arguments"), self._key_arguments.get(params["name"]))

    def _store_key(self, principal: Principal, key: str) -> str:
        """The key as the store knows it: the principal's, so that no other principal's key can match it."""
        return rules.scoped_key(principal, key)

    def _share_of(self, principal: Principal) -> str:
        """Whose share of the store a new record counts against: the principal's own, so that one
        principal filling its share leaves every other principal's answers as they were."""
        return rules.principal_name(principal)

    # -- a record holds the key: conflict, in progress, replay ----------------

    def _answer(self, held: Held, fingerprint: bytes, key: str, ctx: Context) -> dict[str, Any]:
        """A record holds the key: conflict, in progress, or its replay."""
        if held.fingerprint != fingerprint:  # checked first, so a mismatch is a conflict even mid-run
            log.debug("conflict: key=%r tool=%s", key, (ctx.params or {}).get("name"))
            raise rejection(CONFLICT, key)
        if held.outcome is None:  # reject at once, never wait
            log.debug("in progress: key=%r", key)
            raise rejection(IN_PROGRESS, key)
        log.debug("replayed: key=%r", key)
        return self._replay(held.outcome, ctx.protocol_version, rules.declared(ctx.params or {}))

    def _replay(self, outcome: str, revision: str, declared: Mapping[str, Any]) -> dict[str, Any]:
        """The recorded outcome, which the SDK shapes for the retry's revision, if the
        retry declares what the original did; no tool runs. Refused, nothing runs and the record stays."""
        kept = from_json(outcome)
        if "error" in kept:
            raise MCPError(**kept["error"])
        result: dict[str, Any] = as_recorded_then(kept) if "revision" in kept else kept["result"]
        if not expressible(result, revision):
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=f"the recorded outcome has no form in {revision}")
        missing = rules.undeclared(kept.get("declared", {}), declared)
        if missing:  # SEP-2663's -32021, as Tasks answers a call that must declare them
            log.debug("replay withheld: the retry does not declare %s", sorted(missing))
            raise MCPError(
                code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="Missing required client capability",
                data={"requiredCapabilities": missing},
            )
        return result

    # -- the key is ours: run the tool once, and record what it produced ------

    def _keyed_run(self, key: str, store_key: str, fingerprint: bytes, owner: str, tool: str) -> KeyedRun:
        """The life cycle of one claimed call: its lease kept while its tool runs, until the tool's deadline."""
        deadline = self._deadlines.get(tool, self.limits.deadline)
        return KeyedRun(self._store, key, store_key, fingerprint, owner, deadline)

    async def _run_once(self, run: KeyedRun, work: Work) -> Outcome:
        """A keyed run runs in the server's own task group, to completion or its deadline, whatever befalls
        its caller: a cancel, a closed response stream or a vanished client never stops it half way."""
        return await self._runs.outcome(run, work)

    def _never_kept(self, outcome: Outcome) -> bool:
        """Is this an outcome that asks for the request again (-32042, input required), never recorded?"""
        return asks_again(outcome)

    async def _run_and_record(
        self, ctx: Context, call_next: CallNext, key: str, store_key: str, fingerprint: bytes
    ) -> tuple[Outcome, bool]:
        """Run the tool and complete its record in one unit of work: (the outcome, recorded or fenced)."""
        # The tool's own writes to the store join this unit of work, so the charge
        # and the completed record commit together or not at all.
        async with self._store.transaction() as tx:
            forwarded = _keyed_call.set((store_key, fingerprint))
            try:
                outcome = await outcome_of(ctx, call_next, key)
            finally:
                _keyed_call.reset(forwarded)
            if tx.failure is not None:
                # The store failed under the tool (the SDK made that an isError
                # result): that is no outcome of the tool's, and nothing is recorded.
                raise StoreUnavailable(f"the unit of work failed: {tx.failure}") from tx.failure
            if self._never_kept(outcome):
                raise AsksAgain(outcome)  # rolls the unit of work back; the keyed run gives the key back
            outcome, text = recorded_as(acknowledged(outcome, key), key, rules.declared(ctx.params or {}))
            # Sent with the commit, which happens once, as the unit of work ends: the
            # first completion of the key wins; a later one rolls back with everything it did.
            tx.complete(store_key, fingerprint, text)
        return outcome, tx.completed
