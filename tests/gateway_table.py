"""What each gateway keeps of the extension, measured: the key in each placement, the capability, the two
rejections a client retries by, and a result's acknowledgement.

    python3 tests/gateway_table.py            # measure, print the table
    python3 tests/gateway_table.py --write    # measure, and put the table in docs/gateways.md

Every cell is what tests/gateway_runs.py saw the server do and the raw client receive, on each route it names;
a gateway's cells say what it changed from the direct route's.
"""

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from gateway_runs import PLACEMENTS, ROOT, ROUTES, measured, versions
from kit_targets import with_table

DOC = ROOT / "docs" / "gateways.md"
MARKS = ("<!-- table: tests/gateway_table.py --write writes from here -->", "<!-- to here -->")
WORKERS = 3  # routes measured at once: each waits on its charges far more than it computes
# How each route is put together, after its name and versions.
SHAPES = {
    "direct": "no gateway: Streamable HTTP",
    "fastmcp proxy": "`create_proxy(url)`, Streamable HTTP front and back",
    "mcp-proxy, HTTP front": "Streamable HTTP front, the server spawned on stdio",
    "mcp-proxy, stdio front": "stdio front, the server over Streamable HTTP",
    "mcp-remote": "stdio front, `--transport http-only` to the server",
}
DECLARATIONS = {"meta": "`extensions[id]`", "params": "`tools.idempotency`", "argument": "the mark"}


def measured_routes() -> dict[str, dict[str, dict]]:
    """Every route in every placement, a few at once."""
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = {
            (route, placement): pool.submit(measured, route, placement) for route in ROUTES for placement in PLACEMENTS
        }
        return {route: {placement: runs[route, placement].result() for placement in PLACEMENTS} for route in ROUTES}


def key_cell(run: dict) -> str:
    """Did the key reach the server: claimed and then replayed, one charge, the client given the same answer twice;
    or two charges without a key."""
    said, (first, again) = run["server"], run["outcomes"]
    if said["claimed"] == 1 and said["replayed"] == 1 and run["charges"] == 1 and first == again:
        return "✔ claimed, then replayed: charged once"
    if said["no_key"] == 2 and run["charges"] == 2:
        return "✘ dropped: `no key` twice, charged twice"
    raise RuntimeError(f"the server neither honoured nor missed the key: {run}")


def declaration_cell(runs: dict, direct: dict) -> str:
    """What the client was shown of the server's promise in each placement, against what the server declared."""
    return ", ".join(
        f"{name}: {'✔' if runs[placement]['declared'] == direct[placement]['declared'] else '✘'}"
        for placement, name in DECLARATIONS.items()
    )


def rejection_text(received: dict, direct: dict) -> str:
    """A rejection as the client got it: the server's error intact, changed, or flattened into a tool result."""
    if "code" in received:
        mark = "✔" if received == direct else "✘ changed:"
        retryable = str(received["retryable"]).lower()
        return f"{mark} `{received['code']}`, `{received['type']}`, `retryable: {retryable}`"
    return f'✘ flattened: an `isError: {str(received["isError"]).lower()}` result, text only: "{received["text"]}"'


def rejection_cell(runs: dict, direct: dict, which: str) -> str:
    """A rejection in every placement the key reached the server in; one text if they agree."""
    said = {p: rejection_text(run[which], direct[p][which]) for p, run in runs.items() if which in run}
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return "; ".join(f"{placement}: {text}" for placement, text in said.items())


def acknowledgement_cell(runs: dict, direct: dict) -> str:
    """The acknowledgement on the first answer and on the replay, in the `_meta` placement."""
    sent, got = direct["meta"]["acknowledged"], runs["meta"]["acknowledged"]
    if sent == [None, None]:
        return "(the server sends none)"
    return "✔ on the first answer and the replay" if got == sent else f"✘ first {got[0]}, replay {got[1]}"


def table(runs: dict[str, dict[str, dict]]) -> str:
    """The measured table, in markdown."""
    names = versions()
    head = [
        "| route (versions, the SDK under it) | `_meta` key | `params.idempotencyKey` | marked argument "
        "| what the client is shown of the promise | a conflict reaches the client as "
        "| in progress reaches the client as | a result's acknowledgement (`_meta`) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    direct = runs["direct"]
    rows = []
    for route, placed in runs.items():
        version = next((names[gateway] for gateway in names if route.startswith(gateway)), "")
        cells = [
            f"**{route}**{f' {version}' if version else ''}: {SHAPES[route]}",
            *(key_cell(placed[placement]) for placement in PLACEMENTS),
            declaration_cell(placed, direct),
            rejection_cell(placed, direct, "conflict"),
            rejection_cell(placed, direct, "in_progress"),
            acknowledgement_cell(placed, direct),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(head + rows) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="put the table in docs/gateways.md")
    options = parser.parse_args(argv)
    markdown = table(measured_routes())
    if options.write:
        DOC.write_text(with_table(DOC, MARKS, markdown), encoding="utf-8")
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
