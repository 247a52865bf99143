"""SEP-3182 request idempotency in dispatch, on a FastMCP stdio server (mcp 1.x).

Read it beside the SEP: the ledger and its tools, which know nothing of idempotency; then the dispatch layer in
the SEP's order (key, fingerprint, claim, conflict, in progress, replay, deadline, what is kept, retention, bound),
and the capability. S2 (a rule of the SEP, which numbers nothing) and P4 (our position where it is silent) are
this project's ids, from tests/CONFORMANCE.md.
"""

import argparse
import hashlib
import json
import logging
import math
import sys
import time
from importlib.metadata import version
from typing import Annotated, NamedTuple

try:
    import anyio.lowlevel  # binds anyio too
    import mcp.types as types
    from mcp.server.fastmcp import FastMCP
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import McpError
    from pydantic import Field
except ImportError as missing:  # P12: no SDK, a broken one, or mcp 2.x (no FastMCP, and it drops the key)
    if __name__ != "__main__":
        raise
    sys.exit(f"server.py needs the mcp 1.x SDK, which this Python cannot import ({missing}); set it up with: "
             "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")

log = logging.getLogger("idempotency")  # each decision, on stderr: stdout carries the protocol
# --- The ledger and its tools: no idempotency code here ---
mcp = FastMCP("sep-3182-demo", log_level="WARNING")
ledger = {"balance": 0, "charges": 0}
charge_delay = 0.0  # --charge-delay: a slow payment processor, to catch a call in flight
# P3: 100 = 100.0, an integer is exact; "100", true and a float from 2**53 on (2**53 + 1.0 is 2**53) are none
Amount = Annotated[int, Field(gt=0, strict=True)] | Annotated[float, Field(gt=0, multiple_of=1, lt=2**53, strict=True)]

async def charge(amount: Amount) -> str:
    """Apply one charge: the side effect that must not happen twice."""
    await anyio.sleep(charge_delay)
    ledger.update(balance=ledger["balance"] + int(amount), charges=ledger["charges"] + 1)
    return f"Charged {int(amount)}. New balance: {ledger['balance']}"

# Two tools, one function: the name only labels the call the demo sends with a key.
# The SEP has no per-tool opt-in, so a key is honoured on any tool (P13, A1).
mcp.tool("charge_unguarded", "Charge `amount`. The demo calls this one without an idempotencyKey.")(charge)
mcp.tool("charge_guarded", "Charge `amount`. The demo calls this one with an idempotencyKey.")(charge)

@mcp.tool()
def reset_ledger() -> str:
    """Test helper: zero the balance and the charge count; recorded keys are kept."""
    ledger.update(balance=0, charges=0)
    return "Ledger reset."

@mcp.tool(annotations=types.ToolAnnotations(readOnlyHint=True))
def get_balance() -> dict[str, int]:
    """Test helper: the ground truth, the balance and how many charges were applied."""
    return dict(ledger)

# --- The dispatch layer: every tools/call passes here before any tool runs (S0) ---
MAX_KEY_LENGTH = 255  # P2: Stripe's limit; a UUID with any prefix a client adds fits
retention = 24 * 60 * 60.0  # P8, --retention: Stripe's window, longer than any client's retry loop
max_records = 10_000  # P9, --max-records: a flood of new keys costs at most this many records
deadline = 600.0  # P18', --deadline: a run that outlasts it is ended and recorded as failed (a hung tool)
clock = time.monotonic  # P8: tests move a fake clock instead of sleeping

# P5: the SEP names no error code (S3a); -32602 is the seed prototype's. It cannot tell "retry shortly" from "never",
# so error.data says which (P5'): a client branches on error.data.retryable and .type, never on code or message.
ERROR_CODE = -32602
RETRYABLE = {"idempotency_key_in_progress", "idempotency_store_full"}  # P5': the same request, sent later, may succeed
MESSAGES = {
    "invalid_idempotency_key": f"idempotencyKey must be a string of 1 to {MAX_KEY_LENGTH} characters",
    "idempotency_key_conflict": "idempotencyKey was already used with a different tool or arguments",
    "idempotency_key_in_progress": "a request with this idempotencyKey is still running; retry shortly",
    "idempotency_store_full": "the server holds as many idempotency records as it can; retry later",
}
URL_ELICITATION_REQUIRED = -32042  # "finish this in the browser, then send the same request again"
INTERNAL_ERROR = types.ErrorData(code=-32603, message="Internal error: the tool call failed unexpectedly")
DEADLINE_PASSED = "the tool did not finish in {:g} s and was stopped; its effect is unknown: check, then use a new key"

# K2: records are scoped to the authorisation boundary that governs the call: on stdio, this
# process's one client (P10''). A port to HTTP puts the caller's principal (issuer, subject) here.
CLIENT = "this process's stdio client"
Outcome = types.ServerResult | types.ErrorData  # what a tools/call handler answers: a result, or a JSON-RPC error

class Record(NamedTuple):
    """What the server keeps of one key: the request's fingerprint and, once it ran, its outcome."""
    fingerprint: bytes
    outcome: Outcome | None  # None: still running
    expires_at: float  # running: never (P18'); completed: its window's end, from the completion (P8)

# (scope, key) -> Record: running ones, and completed ones in completion order: one window, so expiry order.
_dedup_store: dict[tuple[str, str], Record] = {}

def rejection(kind: str, key: str | None = None) -> McpError:
    """P5, P5': an idempotency rejection: -32602, and error.data.type and .retryable to branch on."""
    data = {"type": kind, "retryable": kind in RETRYABLE} | ({} if key is None else {"idempotencyKey": key})
    return McpError(types.ErrorData(code=ERROR_CODE, message=MESSAGES[kind], data=data))

def key_of(request: types.CallToolRequest) -> str | None:
    """W1, P1, P2: params.idempotencyKey, beside name and arguments; absent or null is no key."""
    # P1: only this sibling of `arguments` is a key; one inside arguments or _meta is the tool's.
    value = (request.params.model_extra or {}).get("idempotencyKey")
    if value is None or (isinstance(value, str) and 1 <= len(value) <= MAX_KEY_LENGTH):
        return value
    log.debug("invalid key")  # what arrived is no key, and may be a megabyte long: never echoed (P2)
    raise rejection("invalid_idempotency_key")

def canonical(value):
    """P3: one spelling per JSON value: 1.0 as 1, -0.0 as 0; true stays true, never 1."""
    if type(value) is float and value.is_integer():  # `type is`: to isinstance, a bool is an int
        return int(value)
    if type(value) is dict:
        return {name: canonical(item) for name, item in value.items()}
    if type(value) is list:
        return [canonical(item) for item in value]
    return value

def fingerprint(tool: str, arguments: dict | None) -> bytes:
    """E1-E6, P3: equal for two calls exactly when they name the same tool with equal arguments."""
    # E1: "solely" name and arguments, so _meta is never passed in; absent arguments are {}.
    # E2: members sorted. E3: numbers by value. E4: strings as parsed, not normalised.
    return hashlib.sha256(json.dumps([tool, canonical(arguments or {})], sort_keys=True).encode()).digest()

def forget_expired() -> None:
    """R1, P8: drop the completed records whose window has passed; their keys are new again (R5)."""
    now, expired = clock(), []
    for scoped_key, record in _dedup_store.items():
        if record.outcome is None:
            continue  # still running: it has no window yet
        if record.expires_at > now:
            break  # completed records come in expiry order: every later one is younger
        expired.append(scoped_key)
    for scoped_key in expired:
        del _dedup_store[scoped_key]

def claim(scoped_key: tuple[str, str], fingerprint: bytes, tool: str) -> None:
    """S0, P4: record the key as running, with its request's fingerprint, before the tool starts."""
    if scoped_key not in _dedup_store and len(_dedup_store) >= max_records:  # R6, P9: refuse, never run unguarded
        log.debug("store full: key=%r", scoped_key[1])
        raise rejection("idempotency_store_full", scoped_key[1])
    _dedup_store[scoped_key] = Record(fingerprint, None, math.inf)
    log.debug("claimed: key=%r tool=%s", scoped_key[1], tool)

def record(scoped_key: tuple[str, str], fingerprint: bytes, outcome: Outcome) -> None:
    """S2, P6', P8: keep the outcome for replay and open its window; or, for -32042, release the key."""
    del _dedup_store[scoped_key]  # released, or in again at the back: completion order is expiry order
    if isinstance(outcome, types.ErrorData) and outcome.code == URL_ELICITATION_REQUIRED:
        # P6': this outcome asks for the same request again once the user is done in the
        # browser; kept, it would answer that retry for 24 hours. So the claim is released.
        log.debug("released: key=%r (URL elicitation required)", scoped_key[1])
        return
    _dedup_store[scoped_key] = Record(fingerprint, outcome, clock() + retention)
    log.debug("recorded: key=%r", scoped_key[1])

async def run_once(scoped_key: tuple[str, str], fingerprint: bytes, request: types.CallToolRequest) -> Outcome:
    """S0, P6', P7, P18': claim the key, run the tool to completion or its deadline, keep the outcome."""
    claim(scoped_key, fingerprint, request.params.name)
    # P7: a cancel or a vanished client must not stop a keyed run half way (a key left running, a charge unrecorded);
    # P18': the run is this process's, so only its own deadline ends it.
    with anyio.CancelScope(shield=True, deadline=anyio.current_time() + deadline) as run:
        try:  # P6': what FastMCP's tools/call handler produced: a result (isError too) or a JSON-RPC error
            outcome = await call_tool(request)
        except McpError as error:
            outcome = error.error
        except Exception:  # P6': kept as an internal error, so the key never stays running
            log.exception("the tool call failed unexpectedly")
            outcome = INTERNAL_ERROR
    if run.cancelled_caught:  # recorded, so the key answers this for its window and never runs the tool again
        log.warning("deadline passed: key=%r, the run was stopped", scoped_key[1])
        outcome = types.ErrorData(code=INTERNAL_ERROR.code, message=DEADLINE_PASSED.format(deadline))
    record(scoped_key, fingerprint, outcome)
    await anyio.lowlevel.checkpoint_if_cancelled()  # a cancel that came meanwhile, now the outcome is safe
    return outcome  # the SDK answers a result as a result, an ErrorData as a JSON-RPC error

async def idempotent_call_tool(request: types.CallToolRequest) -> Outcome:
    """S0-S3, P4: decide a tools/call before any tool runs: run it, reject it, or replay it."""
    if (key := key_of(request)) is None:
        log.debug("no key: tool=%s", request.params.name)
        return await call_tool(request)  # exactly what the server did before (C4)
    forget_expired()
    scoped_key, requested = (CLIENT, key), fingerprint(request.params.name, request.params.arguments)
    found = _dedup_store.get(scoped_key)  # no `await` from here to the claim: no duplicate slips in
    if found is None:
        return await run_once(scoped_key, requested, request)
    if found.fingerprint != requested:  # S3; P4: checked first, so a conflict even while the original runs
        log.debug("conflict: key=%r tool=%s", key, request.params.name)
        raise rejection("idempotency_key_conflict", key)
    if found.outcome is None:  # S1, P18': a second run is refused at once, never queued, and never takes over
        log.debug("in progress: key=%r", key)
        raise rejection("idempotency_key_in_progress", key)
    log.debug("replayed: key=%r", key)  # S2: the original outcome, success or error, as it was
    return found.outcome

# The 1.x SDK has no middleware for MCP requests: the layer takes FastMCP's place in its
# table of request handlers, and calls FastMCP's handler when a tool is to run.
server = mcp._mcp_server
call_tool = server.request_handlers[types.CallToolRequest]
server.request_handlers[types.CallToolRequest] = idempotent_call_tool

# --- The capability, the SDK check, the command line ---
def initialization_options():
    """C1, P11': the initialize result advertises capabilities.tools.idempotency, with its settings."""
    options = server.create_initialization_options()
    # P11': the window in whole seconds, rounded down so no client counts on time not kept (1.5 s says 1).
    options.capabilities.tools.idempotency = {"maxKeyLength": MAX_KEY_LENGTH, "retentionSeconds": int(retention)}
    return options

def sdk_keeps_the_key() -> bool:
    """P12: does this mcp keep an idempotencyKey that arrives beside the arguments? (2.x drops it)"""
    wire = {"method": "tools/call", "params": {"name": "probe", "idempotencyKey": "probe"}}
    try:  # a build that forbids unknown fields raises; one that ignores them has no model_extra
        return types.CallToolRequest.model_validate(wire).params.model_extra.get("idempotencyKey") == "probe"
    except Exception:
        return False

async def serve() -> None:
    """Serve one client over stdin and stdout until it goes away."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, initialization_options())

def main() -> None:
    """Check the SDK, read the options, serve on stdio."""
    global retention, max_records, charge_delay, deadline
    if not sdk_keeps_the_key():
        sys.exit(f"mcp {version('mcp')} does not keep idempotencyKey in tools/call params, so nothing would be "
                 "deduplicated; install the 1.x SDK this demo pins: pip install -r requirements.txt")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retention", type=float, default=retention, help="P8: seconds a key is kept (24 h)")
    parser.add_argument("--max-records", type=int, default=max_records, help="P9: records at most (10,000)")
    parser.add_argument("--deadline", type=float, default=deadline, help="P18': seconds a keyed run may take (600)")
    parser.add_argument("--charge-delay", type=float, default=0.0, help="seconds a charge takes (0)")
    parser.add_argument("--verbose", action="store_true", help="log each idempotency decision on stderr")
    args = parser.parse_args()
    if not (0 < args.retention < math.inf and 0 < args.deadline < math.inf and args.max_records > 0
            and 0 <= args.charge_delay < math.inf):
        parser.error("--retention, --deadline, --max-records must be above 0 (0 voids the guarantee), "
                     "--charge-delay >= 0")
    retention, max_records, charge_delay, deadline = args.retention, args.max_records, args.charge_delay, args.deadline
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s", force=True)
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    log.info("serving: retention %gs, deadline %gs, at most %d records", retention, deadline, max_records)
    anyio.run(serve)

if __name__ == "__main__":
    main()
