"""The demo's ledger server on mcp 2.x: the ledger's tools, with SEP-3182's layer added in one line.

It serves the 2026-07-28 revision (server/discover, a self-contained request each
time) and the 2025 handshake, over stdio or stateless Streamable HTTP, and keeps
its records and its ledger in a store that every instance shares. The layer is
mcp_idempotency.layer; the ledger and its tools below know nothing of idempotency,
but that a charge joins the store's unit of work (P17).

    sep3182-ledger-server                          stdio, records in ./sep3182.db
    sep3182-ledger-server --transport http --port 8000 --store postgresql://...
    sep3182-ledger-server --tasks                  charges run as tasks (SEP-2663, P24): mcp_idempotency_demo/tasks.py
    sep3182-ledger-server --request-state-key-file FILE   every instance seals requestState alike
"""

import argparse
import ipaddress
import logging
import sys
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity

from mcp_idempotency.errors import InvalidSetting
from mcp_idempotency.keyed_run import SHUTDOWN_GRACE
from mcp_idempotency.layer import Idempotency, one_tenant, token_principal
from mcp_idempotency.rules import Placement

from . import ledger, options, tasks

if TYPE_CHECKING:
    from mcp_idempotency.auth import (
        ScopeGate,  # only HTTP with --issuer imports it (joserfc: pip install ./idempotency[auth])
    )

log = logging.getLogger("idempotency")

STORE = "sqlite:sep3182.db"  # P15: one file, shared by every instance started in this folder
SERVER_INFO = {"name": "sep-3182-demo", "version": "2.0"}

# K3, P22: what a token must carry to call each tool over HTTP with authorisation;
# checked on every request, a replay included, before the store is consulted.
TOOL_SCOPES = {
    "charge_unguarded": "ledger:charge",
    "charge_guarded": "ledger:charge",
    "charge_confirmed": "ledger:charge",
    "charge_deferred": "ledger:charge",
    "reset_ledger": "ledger:charge",
    "get_balance": "ledger:read",
}
# P24: with --tasks, the charges run as tasks for a request that declares the extension.
TASK_TOOLS = ("charge_unguarded", "charge_guarded")


def confirmation(amount: int) -> mcp_types.ElicitRequest:
    """The question charge_confirmed asks before it charges: a form with one yes/no field."""
    return mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(
            message=f"Charge {amount}?",
            requested_schema={
                "type": "object",
                "properties": {"confirm": {"type": "boolean"}},
                "required": ["confirm"],
            },
        )
    )


# ----------------------------------------------------------------------------
# The ledger's tools
# ----------------------------------------------------------------------------


def with_idempotency(keys: Idempotency) -> dict[str, Any]:
    """The MCPServer arguments that add the idempotency layer: the one line a server writes."""
    return {"extensions": [keys], "middleware": [keys.advertise], "lifespan": keys.lifespan}


def with_tasks(keys: Idempotency, task_tools: Collection[str] = TASK_TOOLS) -> dict[str, Any]:
    """P24: the MCPServer arguments that add the tasks extension inside the idempotency layer, its gate outside;
    `task_tools` run as tasks (the official suite's fixture server names its own: tests/official_conformance)."""
    extension = tasks.Tasks(keys, task_tools, SERVER_INFO)

    @asynccontextmanager
    async def lifespan(server: Any) -> AsyncIterator[Idempotency]:
        async with keys.lifespan(server) as opened, extension.running():
            yield opened

    # P24: the layer sits outside Tasks (the first extension is the outermost interceptor).
    # It sees the call first, so a key's outcome is the CreateTaskResult, committed with
    # the task it names, and a retry gets that handle back: one task. Inside-out, each
    # retry would make a task of its own before any key was looked at. The gate, a
    # middleware, sits outside both, as a replay needs it, and serves the task methods.
    return {"extensions": [keys, extension], "middleware": [extension.gate, keys.advertise], "lifespan": lifespan}


def ledger_server(
    keys: Idempotency, charge_delay: float, run_tasks: bool = False, state_key: bytes | None = None, **auth: Any
) -> MCPServer:
    """The ledger tools on an MCPServer, with `keys` as its idempotency layer (and Tasks, P24); `state_key`
    seals requestState (else a key of this process's own)."""
    layers = with_tasks(keys) if run_tasks else with_idempotency(keys)
    mcp = MCPServer(
        **SERVER_INFO,
        log_level="WARNING",  # WARNING: stderr is for our decisions
        **layers,
        # The SDK seals each requestState it sends and verifies each one echoed to it, under a key of
        # the process's own unless told otherwise: instances behind one load balancer share one, so a
        # continuation verifies on whichever instance it lands on, as multi round-trip requests intend.
        request_state_security=None if state_key is None else RequestStateSecurity(keys=[state_key]),
        **auth,
    )

    async def charge(amount: int, ctx: Context) -> str:
        """Apply one charge to the ledger: the side effect that must not happen twice."""
        # A slow payment processor, to catch a call in flight; it says it started, to a
        # client that gave a progress token (S5: a replay sends no progress, only the outcome).
        await ctx.report_progress(0, 1, "charging")
        await anyio.sleep(charge_delay)
        async with keys.transaction() as tx:  # P17: under a key, part of the layer's unit of work
            balance = await ledger.charge(tx, amount)
        return f"Charged {amount}. New balance: {balance}"

    @mcp.tool()
    async def charge_unguarded(amount: ledger.Amount, ctx: Context) -> str:
        """Charge `amount`. The demo calls this one without an idempotencyKey; a key would be honoured."""
        return await charge(amount, ctx)

    async def charge_guarded(amount: ledger.Amount, ctx: Context) -> str:
        """Charge `amount`. The demo calls this one with an idempotency key."""
        return await charge(amount, ctx)

    key_argument = keys.key_argument()  # P26: the key's parameter, marked for the protocol, as long as keys take

    async def charge_guarded_with_its_key(
        amount: ledger.Amount,
        ctx: Context,
        idempotency_key: key_argument = None,  # type: ignore[valid-type]  # a pydantic annotation built at run time
    ) -> str:
        """Charge `amount`. The demo calls this one with an idempotency key, its argument idempotency_key."""
        return await charge(amount, ctx)  # the layer read the key, and left it out of "the same request"

    # P26: in the argument placement the tool declares the key in its own schema; in the others it never sees one.
    keyed = keys.placement is Placement.ARGUMENT
    mcp.add_tool(charge_guarded_with_its_key if keyed else charge_guarded, name="charge_guarded")

    @mcp.tool()
    async def charge_confirmed(amount: ledger.Amount, ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Charge `amount` once the user confirms it: the first leg asks (2026-07-28), the next one charges."""
        if ctx.request_state is None:  # P25: the question is no outcome of the key's, and charges nothing
            return mcp_types.InputRequiredResult(
                input_requests={"confirm": confirmation(amount)}, request_state=f"confirm {amount}"
            )
        answer = (ctx.input_responses or {}).get("confirm")
        if not isinstance(answer, mcp_types.ElicitResult) or answer.action != "accept":
            return "Not charged: the user did not confirm."
        return await charge(amount, ctx)

    # The other form of 2026-07-28's InputRequiredResult carries only a requestState: nothing to
    # ask anyone, the request to be sent again with that state, as a server that sheds load or
    # waits on something answers. It is a tool of its own, not a third leg of charge_confirmed:
    # once the user has said yes, that tool has no reason to put the charge off. Here the first
    # leg always defers, as a busy processor would, so the leg that charges is the continuation.
    @mcp.tool()
    async def charge_deferred(amount: ledger.Amount, ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Charge `amount` on the call sent again: the first leg defers it with only a requestState (2026-07-28)."""
        if ctx.request_state is None:  # P25: "send this again, with this state" is no outcome of the key's
            return mcp_types.InputRequiredResult(request_state=f"deferred {amount}")
        return await charge(amount, ctx)

    @mcp.tool()
    async def reset_ledger() -> str:
        """Test helper: zero the balance and the charge count; recorded keys are kept."""
        async with keys.transaction() as tx:
            await ledger.reset(tx)
        return "Ledger reset."

    @mcp.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    async def get_balance() -> dict[str, int]:
        """Test helper: the ground truth, the balance and how many charges were applied."""
        async with keys.transaction() as tx:
            return await ledger.read(tx)

    return mcp


# ----------------------------------------------------------------------------
# The command line and the transports
# ----------------------------------------------------------------------------

STATE_KEY_BYTES = 32  # the least the SDK's sealing takes: 256 bits of secret


def state_key(path: str) -> bytes:
    """--request-state-key-file: the secret the file holds, at least STATE_KEY_BYTES long."""
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None
    if len(secret) < STATE_KEY_BYTES:
        raise argparse.ArgumentTypeError(
            f"{path} holds {len(secret)} bytes; the key needs at least {STATE_KEY_BYTES} bytes of secret randomness"
        )
    return secret


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: transport, store, windows, bound and the processor's delay."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio, or stateless Streamable HTTP (default: stdio)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP: the port (default: 8000); the path is /mcp")
    parser.add_argument(
        "--sse",
        action="store_true",
        help="HTTP: answer each request on an SSE response stream instead of one JSON body",
    )
    parser.add_argument(
        "--store", default=STORE, metavar="URL", help=f"memory, sqlite:PATH or postgresql://... (P15; default: {STORE})"
    )
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="run the charges as tasks for a request that declares io.modelcontextprotocol/tasks (SEP-2663, P24)",
    )
    parser.add_argument(
        "--request-state-key-file",
        dest="state_key",
        type=state_key,
        metavar="FILE",
        help="a file holding the secret that seals requestState (2026-07-28), at least 32 bytes: give every "
        "instance behind one load balancer the same, so a continuation verifies on any of them "
        "(default: a key of this process's own)",
    )
    options.add_common_options(parser)
    oauth = parser.add_argument_group(
        "authorisation (HTTP only): an OAuth 2.1 resource server; see mcp_idempotency/auth.py"
    )
    oauth.add_argument(
        "--issuer",
        metavar="URL",
        help="the authorization server whose JWT access tokens are accepted (its `iss`); "
        "without it, the server serves one tenant",
    )
    oauth.add_argument("--jwks-uri", metavar="URL", help="the issuer's keys (default: from its RFC 8414 metadata)")
    oauth.add_argument(
        "--resource",
        metavar="URL",
        help="this server's URL, the `aud` its tokens must carry (default: http://HOST:PORT/mcp)",
    )
    oauth.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen on a non-loopback address without --issuer, on purpose: one tenant for all (P10')",
    )
    args = parser.parse_args(argv)
    if args.issuer is not None and args.transport == "stdio":
        parser.error("--issuer needs --transport http: on stdio the boundary is the process (P10'')")
    if args.tasks and args.store == "memory":
        parser.error("--tasks keeps its tasks in a SQL store: give --store sqlite:PATH or postgresql://...")
    args.resource = args.resource or f"http://{args.host}:{args.port}/mcp"
    return args


def unauthenticated_refusal(settings: argparse.Namespace) -> str | None:
    """P10': a reason not to serve one tenant on an address other machines reach; None if there is none."""
    if settings.transport == "stdio" or settings.issuer is not None or settings.allow_unauthenticated:
        return None
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:  # a host name
        loopback = settings.host == "localhost"
    return (
        None
        if loopback
        else (
            f"refusing to listen on {settings.host} without authorisation: every client would share one key space "
            "and could replay another's results (K2); give --issuer URL, or --allow-unauthenticated to do it on purpose"
        )
    )


def tenancy(settings: argparse.Namespace) -> str:
    """K2, P10'': what the start-up line says the records are scoped to."""
    if settings.issuer is not None:
        return (
            f"records scoped to each principal (issuer, subject) of tokens from {settings.issuer}, "
            f"for {settings.resource}"
        )
    if settings.transport == "stdio":
        return "serving one tenant: this process's one client (stdio, P10'')"
    return "serving one tenant: no authorisation, every client shares one key space (P10')"


def tables_of(run_tasks: bool) -> tuple[str, ...]:
    """The tables the server's tools keep in the store: the ledger's, and with --tasks the task table."""
    return (*ledger.TABLES, *(tasks.TABLES if run_tasks else ()))


def serve_http(settings: argparse.Namespace, keys: Idempotency, gate: "type[ScopeGate] | None" = None) -> None:
    """Streamable HTTP; with --issuer, an OAuth resource server whose per-tool scopes `gate` checks
    (default: mcp_idempotency/auth.py's ScopeGate)."""
    import uvicorn

    if settings.issuer is None:
        mcp = ledger_server(keys, settings.charge_delay, settings.tasks, settings.state_key)
        app = mcp.streamable_http_app(stateless_http=True, json_response=not settings.sse, host=settings.host)
    else:
        from starlette.middleware import Middleware

        from mcp_idempotency import auth  # only this mode needs joserfc (pip install ./idempotency[auth])

        verifier = auth.JwtVerifier(settings.issuer, settings.resource, settings.jwks_uri)
        mcp = ledger_server(
            keys,
            settings.charge_delay,
            settings.tasks,
            settings.state_key,
            token_verifier=verifier,
            auth=auth.auth_settings(settings.issuer, settings.resource),
        )
        app = mcp.streamable_http_app(stateless_http=True, json_response=not settings.sse, host=settings.host)
        # Innermost, after the SDK's authentication: the verified token is known, no handler has run.
        app.user_middleware.append(Middleware(gate or auth.ScopeGate, scopes=TOOL_SCOPES, resource=settings.resource))
        auth.listing_scopes(app, mcp.settings.auth, sorted(set(TOOL_SCOPES.values())))
    # On SIGTERM uvicorn waits for the requests in flight, without end unless told: a keyed call's request then
    # waits out its run, so it waits the grace a keyed run has, then the layer's shutdown ends the runs.
    grace = int(SHUTDOWN_GRACE)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", timeout_graceful_shutdown=grace)


def main(
    layer: type[Idempotency] = Idempotency, argv: list[str] | None = None, gate: "type[ScopeGate] | None" = None
) -> None:
    """Check the SDK, then serve; stdout carries the protocol on stdio, so every log goes to stderr.

    `layer` is the layer's class, and `gate` the per-tool scope check's over HTTP with --issuer (K3;
    default: auth.ScopeGate): tests/stand_ins/ pass a subclass of either that breaks one rule."""
    settings = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s", force=True)
    log.setLevel(logging.DEBUG if settings.verbose else logging.INFO)
    refusal = unauthenticated_refusal(settings)
    if refusal is not None:
        sys.exit(refusal)
    limits = options.limits_of(settings)
    principal = one_tenant if settings.issuer is None else token_principal
    tables = tables_of(settings.tasks)
    try:
        keys = layer(settings.store, limits=limits, principal=principal, placement=settings.placement, tables=tables)
    except (InvalidSetting, ModuleNotFoundError) as refusal:  # a URL no store of the package takes
        sys.exit(f"cannot open the store {settings.store}: {refusal}")
    # P12': a build that hides the key would let this server look idempotent while it deduplicates
    # nothing. Probed, not assumed, before anything is served; and the store opened once, with the tables.
    keys.check()
    where = "stdio" if settings.transport == "stdio" else f"http://{settings.host}:{settings.port}/mcp"
    log.info(
        "serving on %s: store %s, retention %gs, lease %gs, deadline %gs, at most %d records, charge delay %gs, "
        "key in %s",
        where,
        settings.store,
        settings.retention,
        settings.lease,
        settings.deadline,
        settings.max_records,
        settings.charge_delay,
        settings.placement.value,
    )
    log.info("%s", tenancy(settings))
    if settings.transport == "stdio":
        ledger_server(keys, settings.charge_delay, settings.tasks, settings.state_key).run()
    else:
        serve_http(settings, keys, gate)


if __name__ == "__main__":
    main()
