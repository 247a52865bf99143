"""Section 1's last table: server.py against the seed prototype it grew from, side by side in one loop.

The prototype is the public repository abluva/mcp-request-idempotency-reference. Its code is not
ours, so it is never checked in: pass the path of a copy of its server.py (`--prototype PATH`),
and without one the table says "not measured". Both run on the same 1.x SDK over stdio, quiet,
and are called interleaved, call by call: the figure to read is server.py's keyed call that
executes over the prototype's, which carries everything server.py adds (the fingerprint of P3,
the bound, the window, the deadline every keyed run is held to) against a bare dict lookup.
"""

import sys
from pathlib import Path

from harness import (
    FRESH,
    ROUND_TRIP_COLUMNS,
    Subject,
    close_all,
    percentile,
    print_table,
    progress,
    records_after,
    room_for,
    round_trip_rows,
    round_trips,
    verdict,
)
from round_trip import KEYED_TARGET, REPLAY_TARGET
from wire import LegacyStdioWire

# server.py's keyed call that executes may cost no more than the prototype's: what it adds runs
# once per call, beside an SDK round trip of a millisecond or more.
AGAINST_PROTOTYPE = 1.00


class PrototypeWire(LegacyStdioWire):
    """The prototype over stdio: it has no get_balance, so its ledger is read from a charge of 0."""

    def ledger(self) -> dict:
        """Every charge the bench makes is of 1, so the balance counts the charges."""
        text = self.call("charge_unguarded", {"amount": 0})["result"]["content"][0]["text"]
        balance = int(text.rsplit("New balance: ", 1)[1].rstrip("."))
        return {"balance": balance, "charges": balance}


def against_prototype(server_path: Path, prototype: Path | None, calls: int) -> None:
    """server.py and the prototype, quiet, in one interleaved loop; or "not measured" without a copy."""
    title = "1c. server.py against the seed prototype, over stdio on the same 1.x SDK"
    if prototype is None:
        note = "Pass a copy of abluva/mcp-request-idempotency-reference's server.py as --prototype PATH."
        print_table(title, ["measured"], [["not measured"]], note)
        return
    progress(f"1c. server.py against the prototype ({prototype}): {calls} rounds of 3 calls")
    python = ["env", "-u", "PYTHONPATH", sys.executable]  # as a user starts a server
    ours = LegacyStdioWire("1x-stdio", [*python, str(server_path), *room_for(records_after(calls))])
    theirs = PrototypeWire("prototype", [*python, str(prototype)])
    subjects = [Subject(wire.target, wire, KEYED_TARGET, REPLAY_TARGET) for wire in (ours, theirs)]
    try:
        round_trips(subjects, calls)
    finally:
        close_all([ours, theirs])
    ratio = percentile(subjects[0].samples[FRESH], 50) / percentile(subjects[1].samples[FRESH], 50)
    rows = [row for subject in subjects for row in round_trip_rows(subject)]
    judged = [f"<= {AGAINST_PROTOTYPE:.2f}", verdict(ratio <= AGAINST_PROTOTYPE)]
    rows.append(["server.py / prototype", FRESH, "", "", f"{ratio:.3f}", *judged])
    print_table(title, ROUND_TRIP_COLUMNS, rows, f"The prototype measured: {prototype}, not part of this repository.")
