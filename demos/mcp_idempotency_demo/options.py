"""The command-line options the demo's servers share: the windows, the bounds, the deadline, the tool's delay, the
decision log."""

import argparse

from mcp_idempotency.rules import (
    ARGUMENT_MARK,
    DEADLINE_SECONDS,
    DEFAULT_PLACEMENT,
    EXTENSION_ID,
    MAX_KEY_LENGTH,
    MAX_RECORDS,
    MAX_RECORDS_PER_PRINCIPAL,
    META_KEY,
    RETENTION_SECONDS,
    Placement,
)
from mcp_idempotency.stores import LEASE_SECONDS, Limits

# P2, P8, P9, P9', P18 on the command line: the windows and the bounds the demo's servers keep, settable
# when they start. One that is not above zero would void the guarantee, so it is
# refused before anything serves.


def seconds(text: str) -> float:
    """A window in seconds (P8, P18), above zero."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(text)
    return value


def records(text: str) -> int:
    """A number of records (P9), at least one."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def key_length(text: str) -> int:
    """The longest key taken (P2): 1 to 255 characters, never more than the SEP allows."""
    value = int(text)
    if not 1 <= value <= MAX_KEY_LENGTH:
        raise ValueError(text)
    return value


def delay(text: str) -> float:
    """The demo's charge delay in seconds: zero or more."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError(text)
    return value


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options both servers take: the windows, the bounds, the key's length, the demo's charge delay, the
    placement, the log."""
    parser.add_argument(
        "--retention",
        type=seconds,
        default=RETENTION_SECONDS,
        metavar="SECONDS",
        help="how long a completed key is remembered (P8; default: 24 hours)",
    )
    parser.add_argument(
        "--lease",
        type=seconds,
        default=LEASE_SECONDS,
        metavar="SECONDS",
        help="how long a claim is held before a retry may take it over (P18; default: 30)",
    )
    parser.add_argument(
        "--deadline",
        type=seconds,
        default=DEADLINE_SECONDS,
        metavar="SECONDS",
        help=f"how long a keyed run may take before it is stopped, a failure recorded (default: {DEADLINE_SECONDS:g})",
    )
    parser.add_argument(
        "--max-records",
        type=records,
        default=MAX_RECORDS,
        metavar="N",
        help=f"how many live records the store may hold (P9; default: {MAX_RECORDS})",
    )
    parser.add_argument(
        "--max-records-per-principal",
        type=records,
        default=MAX_RECORDS_PER_PRINCIPAL,
        metavar="N",
        help=f"how many of them one principal may hold (P9'; default: {MAX_RECORDS_PER_PRINCIPAL})",
    )
    parser.add_argument(
        "--max-key-length",
        type=key_length,
        default=MAX_KEY_LENGTH,
        metavar="N",
        help=f"the longest key taken and advertised, in characters (P2, P11'; at most and by default {MAX_KEY_LENGTH})",
    )
    parser.add_argument(
        "--charge-delay",
        type=delay,
        default=0.0,
        metavar="SECONDS",
        help="how long each charge takes, to catch one in flight (default: 0)",
    )
    parser.add_argument(
        "--placement",
        type=Placement,
        choices=list(Placement),
        default=DEFAULT_PLACEMENT,
        metavar="{params,meta,argument}",
        help=f"where the key is read (P26; default: {DEFAULT_PLACEMENT.value}, the library's): _meta[{META_KEY}] "
        f"with capabilities.extensions[{EXTENSION_ID}]; params.idempotencyKey with capabilities.tools.idempotency "
        f"(the SEP's field); or charge_guarded's argument idempotency_key, marked {ARGUMENT_MARK} in its schema",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log every idempotency decision on stderr (the demos turn this on)"
    )


def limits_of(settings: argparse.Namespace) -> Limits:
    """The store's limits as the command line set them."""
    return Limits(
        retention=settings.retention,
        lease=settings.lease,
        max_records=settings.max_records,
        max_records_per_principal=settings.max_records_per_principal,
        max_key_length=settings.max_key_length,
        deadline=settings.deadline,
    )
