"""Section 2: each server's own fingerprint (P3) against its SDK's own parse of the same tools/call, as it grows."""

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

from harness import ROOT, SEED, percentile, print_table, progress, verdict
from wire import sdk2_python, with_envelope

FINGERPRINT_TIMING = Path(__file__).resolve().parent / "fingerprint_timing.py"
SIZES = {"1 KiB": 1 << 10, "64 KiB": 1 << 16, "1 MiB": 1 << 20}
FINGERPRINT_TARGET = 0.5  # the key's own work at most half of what the SDK already does per request
# Linear work keeps ns/byte flat, but the objects parsed from 1 MiB of JSON are
# tens of MB and spill out of the CPU caches where 64 KiB's fit: that step alone
# can double the cost per byte. Super-linear work shows above it: n^1.5 would
# multiply ns/byte by 4 over this 16-fold growth, n^2 by 16.
LINEAR_TARGET = 2.0
WORDS = ["red", "green", "blue", "sale", "new", "gift", "bulk", "fragile", "café", "naïve"]


def basket_item(rng: random.Random) -> dict:
    """One line of a basket: nested objects and arrays, floats (some whole: P3 turns them to ints), strings."""
    return {
        "sku": f"SKU-{rng.randrange(10**8):08d}",
        "name": " ".join(rng.choices(WORDS, k=rng.randrange(1, 5))),
        "price": round(rng.uniform(0.5, 500), 2),
        "quantity": float(rng.randrange(1, 20)),
        "tags": rng.choices(WORDS, k=rng.randrange(0, 4)),
        "size": {"width": rng.random(), "height": rng.random(), "unit": "cm"},
    }


def arguments_of_size(size: int) -> dict:
    """Seeded tools/call arguments whose compact JSON is about `size` bytes."""
    rng = random.Random(SEED)
    basket, length = [], 0
    while length < size:
        basket.append(basket_item(rng))
        length += len(json.dumps(basket[-1], separators=(",", ":"))) + 1
    return {"amount": 100, "basket": basket}


def sdk_timings(python: str, lines: list[str], repeats: int, server_path: Path) -> tuple[str, list[dict]]:
    """Run fingerprint_timing.py with `python` (one SDK's interpreter) on `lines`; its SDK and raw samples."""
    # Without the bench's PYTHONPATH: each interpreter imports what its server imports, from its own environment.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    run = subprocess.run(
        [python, str(FINGERPRINT_TIMING)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        input=json.dumps({"repeats": repeats, "server": str(server_path), "lines": lines}),
    )
    if run.returncode != 0:
        raise RuntimeError(f"{FINGERPRINT_TIMING.name} failed under {python}:\n{run.stderr}")
    answer = json.loads(run.stdout)
    return answer["sdk"], answer["timings"]


def fingerprint_cost(server_path: Path, repeats: int) -> None:
    """Section 2: the fingerprint against each SDK's parse, per size, and its ns per byte; and the digest alone."""
    progress(f"2. fingerprint: {repeats} repetitions at each of {', '.join(SIZES)}, under each SDK")
    messages, lengths = [], []
    for size in SIZES.values():
        arguments = arguments_of_size(size)
        messages.append(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "charge_guarded",
                    "arguments": arguments,
                    "idempotencyKey": str(uuid.UUID(int=SEED)),
                },
            }
        )
        lengths.append(len(json.dumps(arguments, separators=(",", ":")).encode()))
    # The same tools/call, on each SDK's revision: 2025-03-26 for 1.x, 2026-07-28 (its _meta envelope) for 2.x.
    runs = [
        (sys.executable, "server.py", [json.dumps(message) for message in messages]),
        (sdk2_python(), "mcp_idempotency", [json.dumps(with_envelope(message)) for message in messages]),
    ]
    rows, digests, notes = [], [], []
    for python, whose, lines in runs:
        sdk, timings = sdk_timings(python, lines, repeats, server_path)
        ns_per_byte = {}
        for label, length, samples in zip(SIZES, lengths, timings, strict=True):
            median = {name: percentile(values, 50) for name, values in samples.items()}
            fingerprint, parse = median["fingerprint"], median["parse"]
            ns_per_byte[label] = fingerprint / length
            rows.append(
                [
                    f"{sdk}, {whose}",
                    label,
                    length,
                    f"{fingerprint / 1000:.1f}",
                    f"{parse / 1000:.1f}",
                    f"{fingerprint / parse:.2f}",
                    f"<= {FINGERPRINT_TARGET}",
                    verdict(fingerprint / parse <= FINGERPRINT_TARGET),
                    f"{ns_per_byte[label]:.1f}",
                ]
            )
            digests.append(
                [
                    sdk,
                    label,
                    f"{median['blake2b'] / 1000:.1f}",
                    f"{median['sha256'] / 1000:.1f}",
                    f"{median['blake2b'] / median['sha256']:.2f}",
                    "pays" if median["blake2b"] < median["sha256"] else "does not pay",
                ]
            )
        growth = ns_per_byte["1 MiB"] / ns_per_byte["64 KiB"]
        notes.append(
            f"{sdk}: ns/byte x{growth:.2f} (target <= {LINEAR_TARGET}, linear): {verdict(growth <= LINEAR_TARGET)}."
        )
    print_table(
        f"2a. Fingerprint cost against argument size (medians of {repeats} interleaved repetitions, "
        f"each SDK in its own interpreter, each server's own fingerprint)",
        [
            "SDK, fingerprint of",
            "arguments",
            "JSON bytes",
            "fingerprint µs",
            "SDK parse µs",
            "fingerprint / SDK",
            "target",
            "",
            "fingerprint ns/byte",
        ],
        rows,
        "The fingerprint timed is the function each server runs: server.py's own (SHA-256 over json.dumps "
        "with sort_keys), imported from the script; the package's mcp_idempotency.rules.fingerprint "
        "(BLAKE2b over pydantic's JSON of the sorted value), as layer.py calls it on ctx.params. SDK parse: "
        "mcp 1.x validates the line as a JSONRPCMessage, then a dump of it as a ClientRequest (its stdio "
        "server and session); mcp 2.x validates it with jsonrpc_message_adapter.validate_json (its stdio "
        "server), then the params against the revision's surface and as CallToolRequestParams (its "
        "runner, before the handler). Growth of the fingerprint's ns/byte from 64 KiB to 1 MiB: " + " ".join(notes),
    )
    print_table(
        "2b. The fingerprint's digest alone: BLAKE2b (the package's choice) against SHA-256 (server.py's)",
        ["SDK's interpreter", "arguments", "BLAKE2b µs", "SHA-256 µs", "BLAKE2b / SHA-256", "BLAKE2b"],
        digests,
        "Each digest of the request line's bytes (as long as the text the fingerprint hashes), timed beside "
        'the rows of 2a. "pays": BLAKE2b is the cheaper of the two at that size.',
    )
