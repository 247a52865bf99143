"""The rules of SEP-3182 that need no MCP SDK, for the 2.x layer and its servers.

What a valid key is, when two calls are the same request, the window
and the bound kept by default, and how each rejection reads on the wire:
the SEP's rules only, nothing of any server's tools. server.py (mcp 1.x)
holds its own copy of each, the one copy of logic kept on purpose, so that it reads
alone beside the SEP; the repository's tests hold both servers on the wire to the same
rules, so the two cannot drift apart unseen.
"""

import enum
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_json

from .errors import IdempotencyError

__all__ = ["ARGUMENT_MARK", "EXTENSION_ID", "META_KEY", "InvalidKey", "Placement", "checked_key"]


# ----------------------------------------------------------------------------
# Valid keys
# ----------------------------------------------------------------------------

# The longest key taken unless the server is configured otherwise (stores.Limits.max_key_length,
# `--max-key-length`): Stripe's limit, room for a UUID with any prefix a client adds. A server
# may take fewer; the capability advertises what it takes.


MAX_KEY_LENGTH = 255

JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", dict: "an object", list: "an array"}


class InvalidKey(IdempotencyError, ValueError):
    """Raised by checked_key for an idempotencyKey that is neither absent nor a string of 1 to the server's longest
    characters; the layer turns it into the invalid-key rejection the client sees, and runs nothing."""


def checked_key(value: Any, longest: int) -> str | None:
    """The key a client sent in params.idempotencyKey, or None for no key (absent or null);
    `longest` is the longest key this server takes, the maxKeyLength it advertises."""
    if value is None:
        return None
    if isinstance(value, str) and 1 <= len(value) <= longest:
        return value
    # What arrived is no key, and may be a megabyte long: describe it, never echo it.
    got = f"{len(value)} characters" if isinstance(value, str) else JSON_TYPES[type(value)]
    raise InvalidKey(f"it must be a string of 1 to {longest} characters, got {got}")


# ----------------------------------------------------------------------------
# The same request
# ----------------------------------------------------------------------------


def as_json_value(value: Any) -> Any:
    """The value in one spelling: members in sorted order, whole-number floats as ints."""
    if type(value) is float:  # `type is`, not isinstance: True must not become 1
        return int(value) if value.is_integer() else value  # 1.0 -> 1, -0.0 -> 0
    if type(value) is dict:
        return {name: as_json_value(value[name]) for name in sorted(value)}
    if type(value) is list:
        return [as_json_value(item) for item in value]
    return value


def fingerprint(tool: str, arguments: dict[str, Any] | None, key_argument: str | None = None) -> bytes:
    """A digest equal for two calls exactly when they are the same request; a declared key
    argument (`key_argument`) is the key, not the request, so it plays no part."""
    # as_json_value removes member order and makes numbers compare by value;
    # strings are compared as parsed, escapes already resolved, with no
    # Unicode normalisation; absent arguments count as {} and _meta is never
    # passed in. pydantic's serialiser costs a fraction of json.dumps;
    # "constants" keeps an infinity apart from null. BLAKE2b is not the cheaper
    # digest: SHA-256 measured cheaper at every size. It stays because a new digest
    # changes every stored fingerprint, so a retry across the upgrade would read as a
    # conflict: a schema version's change.
    others = {name: value for name, value in (arguments or {}).items() if name != key_argument}
    text = to_json([tool, as_json_value(others)], inf_nan_mode="constants")
    return hashlib.blake2b(text, digest_size=32).digest()


RETENTION_SECONDS = 24 * 60 * 60  # Stripe's window; outlasts any client's retry loop
MAX_RECORDS = 10_000  # a flood of unique keys costs at most this many records
# One principal's share of the store. A tenth of it, so that no fewer than ten
# principals flooding together fill the store; and more than any one client needs
# live at once (a retry loop holds one key at a time, a batch agent a few hundred).
# A deployment with many principals sets the shared bound to shares x principals.
MAX_RECORDS_PER_PRINCIPAL = 1_000


def principal_name(principal: tuple[str, ...]) -> str:
    """A principal as the store knows it, JSON text: no two principals spell the same."""
    return json.dumps(list(principal))


def scoped_key(principal: tuple[str, ...], key: str) -> str:
    """A key as the store knows it, the principal's: no other principal's key can match it."""
    # A JSON array of strings: two different (principal, key) pairs never spell the same
    # text, and every store and instance takes it as it takes a key. Records of an
    # earlier version hold bare keys, which are not JSON arrays unless a client sent
    # one as its key: they match nothing, and expire.
    return json.dumps([*principal, key])


def principal_of(stored_key: str) -> str:
    """The principal_name of a key as the store knows it; "" (nobody) for a bare key of an earlier version."""
    try:
        parts = json.loads(stored_key)
    except ValueError:
        return ""
    if not (isinstance(parts, list) and len(parts) > 1 and all(isinstance(part, str) for part in parts)):
        return ""
    return principal_name(tuple(parts[:-1]))


# ----------------------------------------------------------------------------
# What a request declares, which a replay must still fit
# ----------------------------------------------------------------------------

CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"  # 2026-07-28: a request's own, in its _meta


def declared(params: Mapping[str, Any]) -> dict[str, Any]:
    """The client capabilities a request declares for itself (2026-07-28), {} if none."""
    meta = params.get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, Mapping) else None
    return dict(capabilities) if isinstance(capabilities, Mapping) else {}


def undeclared(original: Mapping[str, Any], retry: Mapping[str, Any]) -> dict[str, Any]:
    """What the original request declared and its retry does not: each capability, and each extension."""
    # A result may take its shape from what its request declared (a task handle only for a
    # client that declared Tasks, a UI resource only for one that renders it), and nothing
    # says which: so a replay asks of its retry everything the original declared.
    missing = {name: value for name, value in original.items() if name != "extensions" and name not in retry}
    theirs, ours = original.get("extensions"), retry.get("extensions")
    if isinstance(theirs, Mapping):
        ours = ours if isinstance(ours, Mapping) else {}
        extensions = {name: value for name, value in theirs.items() if name not in ours}
        missing.update({"extensions": extensions} if extensions else {})
    return missing


def downstream_key(stored_key: str, fingerprint: bytes) -> str:
    """The key a running tool forwards to the API its effect lives in (as its Idempotency-Key header).

    The same for every retry of one call on every instance, since it is derived from what
    they share: the key as the store knows it (so its principal's) and the request's
    fingerprint. A one-way hash, so the API learns neither the client's key nor the
    principal; and another request under the key, or another principal's same key,
    gets another. 64 hex digits: within the 255 characters APIs such as Stripe take."""
    return hashlib.sha256(b"mcp-idempotency downstream key\0" + stored_key.encode() + b"\0" + fingerprint).hexdigest()


def capability(longest: int, retention: float, deadline: float, lease: float) -> dict[str, int]:
    """The settings a client plans its retries by: the longest key taken, the window, how
    long a keyed run may take before the server ends it, and how long a dead holder keeps its key."""
    # The window rounded down, so that no client counts on time the server does not keep (1.5 s
    # advertises 1); the deadline and the lease rounded up, so that no client gives up on a call
    # the server may still be running. A key is in progress for at most deadlineSeconds +
    # leaseSeconds: a live run is ended at its deadline, a dead holder's claim freed by its lease.
    return {
        "maxKeyLength": longest,
        "retentionSeconds": int(retention),
        "deadlineSeconds": math.ceil(deadline),
        "leaseSeconds": math.ceil(lease),
    }


# How long a keyed run may take unless the server or the tool says otherwise, as server.py's
# --deadline: longer than any tool should run, short enough that a hung tool frees its key the same day.
DEADLINE_SECONDS = 600.0


# ----------------------------------------------------------------------------
# Where the key is read and the capability written, one placement at a time
# ----------------------------------------------------------------------------

# The extension's id and its _meta key, by SEP-2133 and the _meta naming rules of
# 2026-07-28 (basic/index.mdx): a reverse-DNS vendor prefix, then a name. A third party
# may not use io.modelcontextprotocol/ (reserved for MCP); com.example is RFC 2606's,
# owned by nobody, so this demonstration collides with no real vendor. Adopted as an
# official extension, both would move under io.modelcontextprotocol/ (a new id, SEP-2133).
EXTENSION_ID = "com.example.sep3182/idempotency"
META_KEY = "com.example.sep3182/idempotencyKey"

# The member of a keyed result's _meta that says its key was honoured: the same on the first
# answer and on every replay (it is recorded with the result), so a client behind a gateway that
# rewrote the handshake still learns from the answer itself that the call was deduplicated.
ACKNOWLEDGEMENT = EXTENSION_ID


def acknowledgement(key: str) -> dict[str, str]:
    """The acknowledgement's value, the key that was honoured, as error.data names it in a rejection."""
    return {"idempotencyKey": key}


# The mark a tool puts on the one inputSchema property that carries the key. Spelled as
# SEP-2243's `x-mcp-header` marks a property for a header: the `x-` prefix is JSON Schema's
# convention for a keyword validators ignore, `mcp-` says the protocol reads it, and the
# rest says what for. `true`, not a name: the property's own name is the tool's to choose.
ARGUMENT_MARK = "x-mcp-idempotency-key"


class Placement(enum.Enum):
    """The SEP's field and capability, an extension with a request _meta key, or a declared argument."""

    PARAMS = "params"  # params.idempotencyKey, capabilities.tools.idempotency (the SEP's)
    META = "meta"  # params._meta[META_KEY], capabilities.extensions[EXTENSION_ID] (SEP-2133)
    ARGUMENT = "argument"  # params.arguments[the property marked ARGUMENT_MARK in the tool's inputSchema]


# The extension's _meta key unless a server picks another: it survives every
# SDK and re-serialising proxy measured, the model never sees it, and no core schema changes.
DEFAULT_PLACEMENT = Placement.META


def marked_argument(input_schema: Mapping[str, Any]) -> str | None:
    """The name of the property a tool's inputSchema marks as its key, or None: that tool takes no key."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    marked = [name for name, schema in properties.items() if isinstance(schema, Mapping) and schema.get(ARGUMENT_MARK)]
    return marked[0] if len(marked) == 1 else None  # two marks say no one key: the tool takes none


def without_key(schema: dict[str, Any]) -> dict[str, Any]:
    """An inputSchema as a model should see it: without its marked key property, nor that property among required."""
    name = marked_argument(schema)
    if name is None:
        return schema
    properties = {other: value for other, value in schema["properties"].items() if other != name}
    required = [other for other in schema.get("required", []) if other != name]
    return {**schema, "properties": properties, **({"required": required} if "required" in schema else {})}


def sent_key(params: Mapping[str, Any], placement: Placement, key_argument: str | None = None) -> Any:
    """What the request carries where this placement reads a key; a key in another place is no key.
    `key_argument` is the called tool's marked property (marked_argument), for the argument placement."""
    if placement is Placement.PARAMS:
        return params.get("idempotencyKey")
    if placement is Placement.ARGUMENT:
        arguments = params.get("arguments")
        return arguments.get(key_argument) if key_argument and isinstance(arguments, Mapping) else None
    meta = params.get("_meta")
    return meta.get(META_KEY) if isinstance(meta, Mapping) else None  # a malformed _meta is the SDK's to refuse


def advertise(capabilities: dict[str, Any], placement: Placement, settings: dict[str, int]) -> None:
    """The capability's settings where this placement advertises them, and only there."""
    if placement is Placement.PARAMS:
        capabilities.setdefault("tools", {})["idempotency"] = settings
    elif placement is Placement.META:
        capabilities["extensions"] = {**(capabilities.get("extensions") or {}), EXTENSION_ID: settings}
    # The argument placement advertises nothing: the marked property in the tool's own schema is the
    # whole declaration (per tool, its maxLength the longest key), and a capability beside it could only
    # repeat the tool list or contradict it; a client that reads a capability would put its key elsewhere.


# ----------------------------------------------------------------------------
# Rejections on the wire
# ----------------------------------------------------------------------------

# The code the seed prototype used, kept: the SEP names none. It is not the
# whole answer, since in-progress, store-full and store-unavailable mean "retry" and the
# other two "do not retry": error.data.retryable says which, and a client
# branches on it and error.data.type, never on the code.
ERROR_CODE = -32602

INVALID_KEY = "invalid_idempotency_key"
CONFLICT = "idempotency_key_conflict"
IN_PROGRESS = "idempotency_key_in_progress"
STORE_FULL = "idempotency_store_full"
STORE_UNAVAILABLE = "idempotency_store_unavailable"

MESSAGES = {
    INVALID_KEY: "invalid idempotencyKey",  # the detail says which lengths this server takes (checked_key)
    CONFLICT: "idempotencyKey was already used with a different tool or arguments",
    IN_PROGRESS: "a request with this idempotencyKey is still running; retry shortly",
    STORE_FULL: "the server holds as many idempotency records as it can; retry later",
    STORE_UNAVAILABLE: "the idempotency store failed before this request's outcome was recorded; retry shortly",
}

# The rejections after which the same request, sent again later, may succeed.
RETRYABLE = {IN_PROGRESS, STORE_FULL, STORE_UNAVAILABLE}


# What a client is told when something unexpected escapes a keyed tool call; kept
# like any outcome, so the key never stays running and every retry hears the same.
INTERNAL_ERROR: dict[str, Any] = {"code": -32603, "message": "Internal error: the tool call failed unexpectedly"}

# -32042, URL elicitation required: "finish this in the browser, then send the same
# request again". Kept, it would answer that retry for the whole window: never recorded.
URL_ELICITATION_REQUIRED = -32042


def rejection(kind: str, key: str | None = None, detail: str | None = None) -> dict[str, Any]:
    """The JSON-RPC error object for a rejection; an invalid key is not echoed."""
    message = MESSAGES[kind] if detail is None else f"{MESSAGES[kind]}; {detail}"
    data: dict[str, Any] = {"type": kind, "retryable": kind in RETRYABLE}
    if key is not None:
        data["idempotencyKey"] = key
    return {"code": ERROR_CODE, "message": message, "data": data}
