"""P26 measured: for each placement and SDK, what survives on the way out, on the way in, and in the capability.

    python3 tests/placement_table.py            # measure, print the table
    python3 tests/placement_table.py --write    # measure, and put the table in docs/placement.md

It runs tests/placement_sdk2.py (mcp 2.x, in .venv-2x) and tests/interop/placement_ts.mjs (the TypeScript
SDKs its lockfile pins; `npm ci` first unless installed from it), the latter against the 2.x ledger server
started over HTTP in each placement. Every yes or no in the table is what that run saw; the "how" beside it
names the API the measuring code used, and its lines are counted in those two files.
"""

import argparse
import json
import subprocess
import sys

from kit_targets import http_servers, ledger_server, with_table
from node_packages import INTEROP, npm_installed
from wire import ROOT, sdk2_python

DOC = ROOT / "docs" / "placement.md"
MARKS = ("<!-- table: tests/placement_table.py --write writes from here -->", "<!-- to here -->")
PLACEMENTS = {
    "params": "`params.idempotencyKey` (the SEP's)",
    "meta": '`_meta["com.example.sep3182/idempotencyKey"]` (an extension)',
    "argument": "`arguments.idempotency_key`, marked `x-mcp-idempotency-key` (a declared argument)",
}
TYPESCRIPT_PLACEMENTS = tuple(PLACEMENTS)  # the TypeScript SDKs are measured in all three (placement_ts.mjs)


def measured_python() -> dict:
    """mcp 2.x, both placements, from placement_sdk2.py."""
    ran = subprocess.run(
        [sdk2_python(), str(ROOT / "tests" / "placement_sdk2.py")], capture_output=True, text=True, timeout=120
    )
    if ran.returncode != 0:
        raise RuntimeError(f"placement_sdk2.py failed:\n{ran.stderr[-2000:]}")
    return json.loads(ran.stdout)


def measured_typescript() -> dict:
    """The TypeScript SDKs, every placement, from placement_ts.mjs against the ledger server in each placement."""
    npm_installed(INTEROP)
    servers = [[*ledger_server(), "--store", "memory", "--placement", placement] for placement in TYPESCRIPT_PLACEMENTS]
    with http_servers(servers) as urls:
        ran = subprocess.run(
            ["node", str(INTEROP / "placement_ts.mjs"), *urls], capture_output=True, text=True, timeout=120
        )
    if ran.returncode != 0:
        raise RuntimeError(f"placement_ts.mjs failed:\n{ran.stderr[-2000:]}")
    return json.loads(ran.stdout)


def said(survived: bool, yes: str, no: str) -> str:
    """A cell: the measured answer first, then how (or why not)."""
    return f"**yes**: {yes}" if survived else f"**no**: {no}"


def kept(capability) -> bool:
    """Did the capability arrive with its settings (the key length and window every server here advertises)?"""
    return (
        isinstance(capability, dict) and {"maxKeyLength": 255, "retentionSeconds": 86400}.items() <= capability.items()
    )


def marked(schema) -> bool:
    """Does a tool's property carry the mark that makes it the key (the declared argument's only declaration)?"""
    return bool((schema or {}).get("x-mcp-idempotency-key"))


def argument_row(sdk: str, argument: dict) -> list[str]:
    """mcp 2.x in the argument placement: an argument like any other, its mark kept in the tool list."""
    return [
        sdk,
        PLACEMENTS["argument"],
        said(argument["sent"], "`client.call_tool(name, {..., KEY_ARGUMENT: key})` (1 line)", "dropped"),
        said(
            argument["middleware"] and argument["intercept_tool_call"] and argument["handler"],
            "a middleware, `Extension.intercept_tool_call` and the handler (as its own parameter)",
            f"middleware {argument['middleware']}, interceptor {argument['intercept_tool_call']}, "
            f"handler {argument['handler']}",
        ),
        said(
            marked(argument["capability_typed"]),
            "no capability: the typed `list_tools()` keeps the mark on the property "
            "(`Field(json_schema_extra=...)`, 1 line)",
            "the typed tool list drops the mark",
        ),
    ]


def matrix(measured: dict) -> str:
    """The options' measured cells on mcp 2.3.0: the way out, a re-serialising gateway, and a client that knows
    nothing of keys."""
    head = [
        f"| placement | a stock {measured['sdk']} client sends it | it reaches the server behind a gateway that "
        "re-sends the typed request (stock SDK, client and server) | a stock client that knows nothing of keys "
        "sends one | the key property is in the tool list that client hands a model |",
        "|---|---|---|---|---|",
    ]
    yes_no = {True: "**yes**", False: "**no**"}
    rows = [
        [
            PLACEMENTS[placement],
            yes_no[row["sent"]],
            yes_no[row["through_a_gateway"]],
            yes_no[row["unaware_client_sends_a_key"]]
            + ("" if placement != "argument" else ": but whatever a model puts in the property it sees, is sent"),
            yes_no[row["marked_property_in_the_stock_tool_list"]],
        ]
        for placement, row in measured["rows"].items()
    ]
    mirrored = ", ".join(f"`{name}: {value}`" for name, value in measured["mirrored_headers"].items())
    header = (
        f"\nA key argument also marked `x-mcp-header` (SEP-2243), called by the stock {measured['sdk']} client over "
        f"Streamable HTTP on 2026-07-28: the headers it sends are {mirrored or '**none**'}. The SDK takes that mark "
        "only on a property that cannot be null.\n"
    )
    return "\n".join(head + ["| " + " | ".join(row) + " |" for row in rows]) + "\n" + header


def python_rows(measured: dict) -> list[list[str]]:
    """mcp 2.x's rows: client, then server, in each placement."""
    sdk, params, meta = measured["sdk"], measured["rows"]["params"], measured["rows"]["meta"]
    return [
        [
            sdk,
            PLACEMENTS["params"],
            said(
                params["sent"],
                "stock `CallToolRequestParams`",
                "the stock `CallToolRequestParams` drops it; a subclass that declares it sends it "
                "(`mcp_idempotency/keyed_call.py`, 2 classes, 6 lines)",
            ),
            said(
                params["middleware"],
                "only raw: a server middleware (`ctx.params`, the layer) and a handler reading "
                "`ctx.request_context.params`; `Extension.intercept_tool_call` gets validated params without it, "
                + ("but its `ctx.params` keeps the raw key" if params["intercept_raw_params"] else "the key gone")
                if params["handler"]
                else "only in a server middleware (`ctx.params`, the layer)",
                "not even in a middleware",
            ),
            said(
                kept(params["capability_on_the_wire"]) and kept(params["capability_typed"]),
                "typed",
                "no server API declares it: a middleware adds it to the `server/discover` and `initialize` "
                "results (3 lines); the typed `client.server_capabilities` drops it, so a client reads it raw"
                if kept(params["capability_on_the_wire"])
                else "not on the wire",
            ),
        ],
        [
            sdk,
            PLACEMENTS["meta"],
            said(meta["sent"], "`client.call_tool(name, arguments, meta={KEY: key})` (1 line)", "dropped"),
            said(
                meta["middleware"] and meta["intercept_tool_call"] and meta["handler"],
                "a middleware, `Extension.intercept_tool_call` (validated params keep `_meta`) and the handler "
                "(`ctx.request_context.meta`)",
                f"middleware {meta['middleware']}, interceptor {meta['intercept_tool_call']}, "
                f"handler {meta['handler']}",
            ),
            said(
                kept(meta["capability_on_the_wire"]) and kept(meta["capability_typed"]),
                "`Extension.settings()` (SEP-2133, stock; 4 lines) puts it on the wire, and the typed "
                "`client.server_capabilities.extensions[id]` keeps it",
                f"on the wire {meta['capability_on_the_wire']}, typed {meta['capability_typed']}",
            ),
        ],
    ]


# How each TypeScript server SDK lets a server see the key and write the capability, by placement: the
# callback's view, the seam below it, the one line that advertises, and the schema a tool declares its key in.
TYPESCRIPT_SERVERS = {
    "server_v1": {
        "label": "{v1} (`McpServer`)",
        "schema": "the zod shape `registerTool` takes",
        "handler": "the tool callback's `extra._meta[KEY]`, and the raw message on the `Transport`",
        "seam": "only on the `Transport` (a wrapper reads the raw message, as typescript/server.ts does); "
        "`CallToolRequestSchema` drops it before any handler",
        "advertise": "`server.server.registerCapabilities({{{capability}}})`",
    },
    "server_v2": {
        "label": "{server_v2} (`McpServer`, 2026-07-28)",
        "schema": "the `z.object` `registerTool` takes",
        "handler": "the tool callback's `ctx.mcpReq._meta[KEY]`, and the raw body at `createMcpHandler`'s `fetch`",
        "seam": "only at `createMcpHandler`'s `fetch` (a wrapper reads the raw body first); the tool callback "
        "gets validated arguments and `ctx.mcpReq`, which holds no params",
        "advertise": "`new McpServer(info, {{capabilities: {{{capability}}}}})`",
    },
}


def typescript_server_row(server: str, sdks: dict, placement: str, measured: dict) -> list[str]:
    """One TypeScript server SDK in one placement: what reaches its handler, and the capability on the wire."""
    how = TYPESCRIPT_SERVERS[server]
    capability = "tools: {idempotency}" if placement == "params" else "extensions: {[id]: settings}"
    advertise = how["advertise"].format(capability=capability)
    return [
        how["label"].format(**sdks),
        PLACEMENTS[placement],
        "(a server)",
        said(measured["handler"], how["handler"], how["seam"] if measured["transport"] else "not even at its seam"),
        said(
            kept(measured["capability_on_the_wire"]),
            f"on the wire by {advertise}, typed (1 line)"
            if placement == "meta"
            else f"on the wire by {advertise}, with a cast: the type allows only `listChanged`; "
            "the schema keeps it at run time (1 line)",
            "not on the wire",
        ),
    ]


def typescript_argument_server_row(server: str, sdks: dict, measured: dict) -> list[str]:
    """One TypeScript server SDK with the declared argument: does its tool callback get the key, and does
    tools/list carry the mark its zod schema put on the property?"""
    how = TYPESCRIPT_SERVERS[server]
    return [
        how["label"].format(**sdks),
        PLACEMENTS["argument"],
        "(a server)",
        said(
            measured["handler"],
            "the tool callback's validated arguments (`args.idempotency_key`), as declared",
            "validation drops it before the tool callback" if measured["transport"] else "not even at its seam",
        ),
        said(
            marked(measured["capability_on_the_wire"]),
            "no capability: `tools/list` shows the mark, put on the property by zod's "
            f"`.meta({{[mark]: true}})` in {how['schema']} (1 line)",
            "`tools/list` drops the mark",
        ),
    ]


# What a TypeScript client calls, by placement, and what its typed view keeps (or drops) of the declaration.
TYPESCRIPT_CLIENTS = {
    "params": {
        "call": "{..., idempotencyKey: key}",
        "kept": "the typed `getServerCapabilities().tools.idempotency` keeps it",
        "dropped": "the typed `getServerCapabilities().tools` drops it: read the raw result",
    },
    "meta": {
        "call": "{..., _meta: {[KEY]: key}}",
        "kept": "the typed `getServerCapabilities().extensions[id]` keeps it",
        "dropped": "the typed `getServerCapabilities().extensions` drops it: read the raw result",
    },
    "argument": {
        "call": "{..., arguments: {..., idempotency_key: key}}",
        "kept": "no capability: the typed `listTools()` keeps the mark on the property",
        "dropped": "no capability, and the typed `listTools()` drops the mark: read the raw result",
    },
}


def typescript_client_row(sdk: str, placement: str, measured: dict) -> list[str]:
    """One TypeScript client SDK in one placement: was the key sent, and does its typed view keep the declaration?"""
    how = TYPESCRIPT_CLIENTS[placement]
    declared = marked if placement == "argument" else kept
    return [
        sdk,
        PLACEMENTS[placement],
        said(measured["sent"], f"`client.callTool({how['call']})` sends params as given (1 line)", "dropped"),
        "(a client)",
        said(declared(measured["capability_typed"]), how["kept"], how["dropped"]),
    ]


def typescript_rows(measured: dict) -> list[list[str]]:
    """The TypeScript SDKs' rows: the v2 client, the 1.x client, the 1.x server, the v2 server, in each placement."""
    sdks, rows = measured["sdks"], measured["rows"]
    lines = []
    for placement in TYPESCRIPT_PLACEMENTS:
        row = rows[placement]
        for client, sdk in (("client_v2", sdks["client_v2"]), ("client_v1", f"{sdks['v1']} (client)")):
            lines.append(typescript_client_row(sdk, placement, row[client]))
        lines += [
            typescript_argument_server_row(server, sdks, row[server])
            if placement == "argument"
            else typescript_server_row(server, sdks, placement, row[server])
            for server in TYPESCRIPT_SERVERS
        ]
    return lines


def table(python: dict, typescript: dict) -> str:
    """The measured table, in markdown."""
    head = [
        "| SDK | placement | the way out: the client sends it | the way in: the server sees it | "
        "the capability: the client sees it |",
        "|---|---|---|---|---|",
    ]
    argument = argument_row(python["sdk"], python["rows"]["argument"])
    rows = [*python_rows(python), argument, *typescript_rows(typescript)]
    return "\n".join(head + ["| " + " | ".join(row) + " |" for row in rows]) + "\n\n" + matrix(python)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="put the table in docs/placement.md")
    options = parser.parse_args(argv)
    markdown = table(measured_python(), measured_typescript())
    if options.write:
        DOC.write_text(with_table(DOC, MARKS, markdown), encoding="utf-8")
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
