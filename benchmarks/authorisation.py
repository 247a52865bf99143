"""Section 6: the round trip on the 2.x server over HTTP with OAuth on, beside the same without it, on every store."""

import shutil
import tempfile
from pathlib import Path

from harness import (
    FRESH,
    KINDS,
    REPLAY,
    ROUND_TRIP_COLUMNS,
    STORES,
    UNKEYED,
    WARMUP_ROUNDS,
    Postgres,
    Subject,
    close_all,
    launch_all,
    measured_stores,
    new_store,
    print_table,
    progress,
    records_after,
    room_for,
    round_trip_rows,
    round_trips,
    share_for,
)
from oauth import RESOURCE, Issuer, bearer
from shared_stores import KEYED_TARGET, REPLAY_TARGET

WITHOUT, WITH = "no authorisation", "OAuth, --issuer"


def authorisation(calls: int, postgres: Postgres) -> None:
    """Section 6: each store without and with OAuth, every server in one interleaved loop, on a store of its own."""
    folder = Path(tempfile.mkdtemp(prefix="sep3182-bench-"))
    labels = measured_stores(postgres)
    configurations = [(label, mode) for label in labels for mode in (WITHOUT, WITH)]
    issuer = Issuer()  # the real one, as the tests start it: Authlib, client credentials, RS256 JWTs
    try:
        progress(
            f"6. authorisation: {', '.join(labels)}, each without and with OAuth, "
            f"{min(WARMUP_ROUNDS, calls)} warm-up rounds, then {calls} rounds of 3 calls"
        )
        oauth = ("--issuer", issuer.url, "--resource", RESOURCE)
        wires = launch_all(
            *[
                (
                    (
                        "2x-http",
                        "--store",
                        new_store(label, folder, postgres),
                        *room_for(records_after(calls)),
                        *share_for(records_after(calls)),
                        *(oauth if mode == WITH else ()),
                    ),
                    {"headers": bearer(issuer.token("alice")) if mode == WITH else None},
                )
                for label, mode in configurations
            ]
        )
        try:
            subjects = {
                (label, mode): Subject(f"{label}, {mode}", wire, KEYED_TARGET[label], REPLAY_TARGET)
                for (label, mode), wire in zip(configurations, wires, strict=True)
            }
            round_trips(list(subjects.values()), calls)
        finally:
            close_all(wires)
    finally:
        issuer.close()
        postgres.drop()
        shutil.rmtree(folder, ignore_errors=True)
    report_authorisation(subjects, postgres, calls)


def report_authorisation(subjects: dict[tuple[str, str], Subject], postgres: Postgres, calls: int) -> None:
    """Section 6's two tables: every round trip, then the ratios side by side and what the token's check adds."""
    missing = f"not measured ({postgres.missing})"
    rows = []
    for label in STORES:
        for mode in (WITHOUT, WITH):
            if (label, mode) in subjects:
                rows += round_trip_rows(subjects[label, mode])
            else:
                rows.append([f"{label}, {mode}", missing, "", "", "", "", ""])
    print_table(
        f"6a. Authorisation: round trip over HTTP on the 2.x server, quiet, without and with OAuth "
        f"({calls} calls of each kind, interleaved)",
        ROUND_TRIP_COLUMNS,
        rows,
        "Every server ran on a store of its own (a SQLite file, a PostgreSQL database), all of them "
        "measured in one loop, interleaved call by call. With OAuth, the server trusts the real issuer "
        "(mcp_idempotency_demo.issuer) and every call carries one bearer access token (RS256, both scopes); "
        "the targets are each store's, as in section 5.",
    )

    rows = []
    for label in STORES:
        if (label, WITH) not in subjects:
            rows.append([label, missing, "", "", "", "", ""])
            continue
        median = {(mode, kind): subjects[label, mode].median(kind) for mode in (WITHOUT, WITH) for kind in KINDS}
        rows.append(
            [
                label,
                *(
                    f"{median[mode, kind] / median[mode, UNKEYED]:.3f}"
                    for kind in (FRESH, REPLAY)
                    for mode in (WITHOUT, WITH)
                ),
                f"{median[WITH, UNKEYED] / median[WITHOUT, UNKEYED]:.3f}",
                f"{median[WITH, UNKEYED] - median[WITHOUT, UNKEYED]:.0f}",
            ]
        )
    print_table(
        "6b. Authorisation: keyed over unkeyed without and with OAuth, and what the token's check costs",
        [
            "store",
            "executes / unkeyed, without",
            "executes / unkeyed, with OAuth",
            "replay / unkeyed, without",
            "replay / unkeyed, with OAuth",
            "unkeyed with OAuth / without",
            "µs added per request",
        ],
        rows,
        "Medians of 6a. The first four columns are what a key costs with authorisation off and on: the "
        "record's key holds the token's issuer and subject, so scoping adds no store round trip. The last "
        "two are what authorisation costs every request, keyed or not: the SDK's bearer check (joserfc "
        "verifies the token's RS256 signature against the cached JWKS, then its claims) and the "
        "per-tool scope check (mcp_idempotency/auth.py ScopeGate), which parses the body once more. No "
        "target: the price of OAuth, not of the key.",
    )
