"""P11, P12: the capability as the wire and the SDK client see it; the key the 1.x SDK client
sends; and the refusal to run on an SDK that would drop the key."""

import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

import mcp.types as types
import pytest
from conftest import sdk_session
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from wire import REPLY_TIMEOUT, ROOT, SDK2_SERVER, SERVER, sdk2_python

from client_demo import call_tool

# ----------------------------------------------------------------------------
# P11: the capability
# ----------------------------------------------------------------------------


SETTINGS = {"maxKeyLength": 255, "retentionSeconds": 86400}  # P11': the default window, a day
# P31: the library also says how long a key may stay in progress: the run's deadline and a dead holder's lease.
RUN_BOUNDS = {"deadlineSeconds": 600, "leaseSeconds": 30}


def settings_of(target: str) -> dict[str, int]:
    """The default settings a target advertises: server.py bounds its runs without advertising the bound."""
    return SETTINGS if target.startswith("1x") else {**SETTINGS, **RUN_BOUNDS}


def test_capability_is_advertised_on_the_wire(wire):
    """P11 on 1.x (the initialize result), P14 on 2.x (the server/discover result), with P11' settings."""
    assert wire.capabilities["tools"]["idempotency"] == settings_of(wire.target)


def test_capability_advertises_the_window_set_at_start_in_whole_seconds_rounded_down(spawn):
    """P11': --retention 1.5 keeps a key a second and a half, and promises a client one second of it."""
    wire = spawn("--retention", "1.5")
    assert wire.capabilities["tools"]["idempotency"] == {**settings_of(wire.target), "retentionSeconds": 1}


@pytest.mark.targets("2x-http")
def test_initialize_result_advertises_it_too_for_a_2025_client(wire):
    """P14: a client of the 2025 handshake finds it where it looks, in the initialize result."""
    wire.revision = "2025-11-25"
    initialized = wire.request(
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}},
    )
    assert initialized["result"]["protocolVersion"] == "2025-11-25"
    assert initialized["result"]["capabilities"]["tools"]["idempotency"] == settings_of(wire.target)


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_sdk_client_reads_the_idempotency_capability():
    async with sdk_session() as session:
        assert session.initialize_result.capabilities.tools.model_extra == {"idempotency": SETTINGS}


# ----------------------------------------------------------------------------
# The 1.x SDK client puts the key where SEP-3182 does, and the server deduplicates it
# ----------------------------------------------------------------------------


@pytest.mark.targets("1x-stdio")
def test_sdk_params_model_puts_the_key_beside_arguments():
    params = types.CallToolRequestParams(name="x", arguments={}, idempotencyKey="k")

    assert params.model_dump(by_alias=True, exclude_none=True) == {"name": "x", "arguments": {}, "idempotencyKey": "k"}


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_sdk_client_sends_the_key_beside_arguments_on_the_wire(tmp_path):
    # What the server read, byte for byte: its stdin passes through tee on the way in.
    received = tmp_path / "stdin.jsonl"
    params = StdioServerParameters(
        command="sh", args=["-c", 'tee "$0" | exec "$1" "$2"', str(received), sys.executable, str(SERVER)]
    )
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-wire-key", REPLY_TIMEOUT)

    calls = [
        message
        for message in map(json.loads, received.read_text().splitlines())
        if message.get("method") == "tools/call"
    ]
    assert [call["params"] for call in calls] == [
        {"name": "charge_guarded", "arguments": {"amount": 100}, "idempotencyKey": "sdk-wire-key"}
    ]


@pytest.mark.targets("1x-stdio")
@pytest.mark.anyio
async def test_sdk_client_keyed_retry_is_deduplicated():
    async with sdk_session() as session:
        original = await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-retry-key", REPLY_TIMEOUT)
        retry = await call_tool(session, "charge_guarded", {"amount": 100}, "sdk-retry-key", REPLY_TIMEOUT)
        ledger = json.loads((await session.call_tool("get_balance", {})).content[0].text)

    assert retry == original
    assert ledger == {"balance": 100, "charges": 1}


# ----------------------------------------------------------------------------
# P12, P12': on an SDK that would lose the key, nothing runs, and one line says why
# ----------------------------------------------------------------------------

# Each form is a sitecustomize.py that reshapes the installed SDK before the script
# runs, so the script is run exactly as a user runs it (`python server.py`) and its
# probe is the real one, facing an SDK that really behaves that way.
SDK1_FORMS = {
    # A build that ignores unknown params fields, as mcp 2.x does: the params model,
    # the request, and ClientRequest (which the server's session validates every
    # incoming request with) are rebuilt to drop the key.
    "ignores": """
import mcp.types as t
t.CallToolRequestParams.model_config["extra"] = "ignore"
for model in (t.CallToolRequestParams, t.CallToolRequest, t.ClientRequest):
    model.model_rebuild(force=True)
""",
    # A build that forbids them: the probe's own validation raises.
    "forbids": """
import mcp.types as t
t.CallToolRequestParams.model_config["extra"] = "forbid"
for model in (t.CallToolRequestParams, t.CallToolRequest, t.ClientRequest):
    model.model_rebuild(force=True)
""",
}
SDK2_FORMS = {
    # A 2.x build whose dispatch strips unknown params before any middleware sees them.
    "ignores": """
import mcp.server.runner as runner
on_request = runner.ServerRunner._on_request
async def stripped(self, dctx, method, params):
    return await on_request(self, dctx, method, {k: v for k, v in (params or {}).items() if k != "idempotencyKey"})
runner.ServerRunner._on_request = stripped
""",
    # A 2.x build whose params model forbids unknown fields: the keyed call is rejected.
    "forbids": """
import warnings, mcp_types
# pydantic notes, for this model and each subclass, that a TypedDict inside keeps its own extras.
warnings.filterwarnings("ignore", message="TypedDict class 'RequestParamsMeta' allows extra items")
mcp_types.CallToolRequestParams.model_config["extra"] = "forbid"
mcp_types.CallToolRequestParams.model_rebuild(force=True)
""",
}

# What the server's session does with an incoming line: parse it, then validate the
# request as a ClientRequest; prints the params' extra fields as the server would see them.
PROBE = """
import json, mcp.types as t
line = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","arguments":{},"idempotencyKey":"k"}}'
message = t.JSONRPCMessage.model_validate_json(line).root.model_dump(by_alias=True, mode="json", exclude_none=True)
try:
    print(json.dumps(t.ClientRequest.model_validate(message).root.params.model_extra))
except Exception as error:
    print(json.dumps(type(error).__name__))
"""


def run(python: str, *arguments: str, site: str | None = None, tmp_path=None) -> subprocess.CompletedProcess:
    """`python ARGUMENTS` from the project root, nothing on stdin; with `site` as its sitecustomize.py."""
    environment = dict(os.environ)
    if site is not None:
        (tmp_path / "sitecustomize.py").write_text(site)
        environment["PYTHONPATH"] = str(tmp_path)
    return subprocess.run(
        [python, *arguments],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        env=environment,
        capture_output=True,
        text=True,
        timeout=REPLY_TIMEOUT,
    )


def one_line(refused: subprocess.CompletedProcess) -> str:
    """A refusal: exit status non-zero, nothing on stdout, exactly one line on stderr; that line."""
    assert refused.returncode != 0
    assert refused.stdout == ""  # nothing served, no demo played
    # Exactly one line: no traceback, and no warning (mcp 1.29.0 and older print pydantic-settings' one).
    [line] = refused.stderr.splitlines()
    return line


@pytest.mark.parametrize(
    ("form", "seen_by_the_server"),
    [
        pytest.param(None, {"idempotencyKey": "k"}, id="installed_sdk_keeps_the_key"),
        pytest.param("ignores", None, id="sdk_that_ignores_drops_the_key"),
        pytest.param("forbids", "ValidationError", id="sdk_that_forbids_rejects_the_key"),
    ],
)
@pytest.mark.targets("1x-stdio")
def test_the_simulated_sdks_really_lose_the_key(tmp_path, form, seen_by_the_server):
    # The refusal tests below mean something only if each form really loses the key
    # from what the server would dispatch, and the unpatched SDK keeps it.
    probe = run(sys.executable, "-c", PROBE, site=SDK1_FORMS.get(form, ""), tmp_path=tmp_path)

    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == seen_by_the_server


@pytest.mark.targets("1x-stdio")
def test_importing_the_reference_prints_nothing_and_exits_nothing():
    # A reader, a test or a tool may import server.py to look at it: that must not serve,
    # print or exit. The demo client spawns the server; it does not import it.
    imported = run(sys.executable, "-c", "import server, client_demo; print(server.mcp.name)")

    assert (imported.returncode, imported.stdout, imported.stderr) == (0, "sep-3182-demo\n", "")


@pytest.mark.targets("2x-stdio", "2x-http")
def test_importing_the_reference_on_mcp2_raises_instead_of_exiting():
    imported = run(sdk2_python(), "-c", "import server")

    assert imported.returncode == 1 and imported.stdout == ""
    assert imported.stderr.splitlines()[-1].startswith("ModuleNotFoundError: No module named 'mcp.server.fastmcp'")


@pytest.mark.targets("1x-stdio")
def test_unpatched_server_serves():
    # The control: the same command, unpatched, starts the server (which exits at EOF).
    served = run(sys.executable, "server.py")

    assert served.returncode == 0, served.stderr
    assert "idempotency: serving:" in served.stderr


@pytest.mark.targets("1x-stdio")
@pytest.mark.parametrize("form", SDK1_FORMS)
@pytest.mark.parametrize("script", ["server.py", "client_demo.py"])
def test_refuses_to_run_when_the_sdk_loses_the_key(tmp_path, script, form):
    line = one_line(run(sys.executable, script, site=SDK1_FORMS[form], tmp_path=tmp_path))

    assert f"mcp {version('mcp')} does not keep idempotencyKey" in line  # the cause
    assert "pip install -r requirements.txt" in line  # the fix


@pytest.mark.targets("2x-stdio", "2x-http")
@pytest.mark.parametrize("form", SDK2_FORMS)
def test_sdk2_server_refuses_to_start_when_the_key_does_not_reach_its_extension(tmp_path, form):
    line = one_line(run(sdk2_python(), *SDK2_SERVER, "--store", "memory", site=SDK2_FORMS[form], tmp_path=tmp_path))

    assert "does not hand a tools/call's idempotencyKey to an Extension" in line  # the cause
    assert "pip install ./idempotency" in line  # the fix


# ----------------------------------------------------------------------------
# A newcomer's first minute: no SDK at all, or one that cannot be imported
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A fresh virtual environment with nothing installed: what `python3` is on a new machine."""
    folder = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    return str(folder / "bin" / "python")


@pytest.mark.targets("1x-stdio")
@pytest.mark.parametrize("script", ["server.py", "client_demo.py"])
def test_without_the_sdk_one_line_names_what_is_missing_and_the_fix(bare_python, script):
    line = one_line(run(bare_python, script))

    assert f"{script} needs the mcp 1.x SDK" in line and "No module named" in line  # what is missing
    assert "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt" in line  # the README's set-up


# An mcp that is installed but fails on import, as mcp 1.21.0 and older do beside pydantic 2.14.
BROKEN_MCP = "raise ImportError(\"cannot import name 'eval_type_backport' from 'pydantic._internal._typing_extra'\")\n"


@pytest.mark.targets("1x-stdio")
@pytest.mark.parametrize("script", ["server.py", "client_demo.py"])
def test_an_sdk_that_cannot_be_imported_gets_the_same_one_line(tmp_path, script):
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text(BROKEN_MCP)

    line = one_line(run(sys.executable, script, site="", tmp_path=tmp_path))

    assert "cannot import name 'eval_type_backport'" in line
    assert "pip install -r requirements.txt" in line


# ----------------------------------------------------------------------------
# Bad command lines: a window or a bound that would void the guarantee is refused
# ----------------------------------------------------------------------------

BAD_OPTIONS = [
    pytest.param(("--retention", "0"), id="retention-0"),
    pytest.param(("--retention", "-1"), id="retention-negative"),
    pytest.param(("--max-records", "0"), id="max-records-0"),
    pytest.param(("--charge-delay", "-1"), id="charge-delay-negative"),
]
# P18', P31: what ends a run: a deadline (server.py's and the 2.x server's); the 2.x server's lease
DEADLINE = [pytest.param(("--deadline", "0"), id="deadline-0"), pytest.param(("--deadline", "nan"), id="deadline-nan")]
LEASE = [pytest.param(("--lease", "0"), id="lease-0"), pytest.param(("--lease", "nan"), id="lease-nan")]


def refused_option(python: str, *server: str, options: tuple[str, ...]) -> None:
    """The server exits at once with argparse's usage error naming the option, and serves nothing."""
    refused = run(python, *server, *options)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "error:" in refused.stderr.splitlines()[-1] and options[0] in refused.stderr.splitlines()[-1]


@pytest.mark.targets("1x-stdio")
@pytest.mark.parametrize("options", BAD_OPTIONS + DEADLINE)
def test_server_refuses_a_window_or_bound_that_is_not_positive(options):
    refused_option(sys.executable, "server.py", options=options)


@pytest.mark.targets("2x-stdio", "2x-http")
@pytest.mark.parametrize("options", BAD_OPTIONS + LEASE + DEADLINE)
def test_sdk2_server_refuses_a_window_or_bound_that_is_not_positive(options):
    refused_option(sdk2_python(), *SDK2_SERVER, options=options)


@pytest.mark.targets("2x-stdio", "2x-http")
@pytest.mark.parametrize("form", SDK2_FORMS)
def test_a_server_built_from_the_library_alone_refuses_to_start_when_the_key_is_hidden(tmp_path, form):
    """The layer's own start-up probes the SDK: idempotency/examples/booking.py calls no probe of its own."""
    booking = str(ROOT / "idempotency" / "examples" / "booking.py")
    refused = run(sdk2_python(), booking, "--store", "memory", site=SDK2_FORMS[form], tmp_path=tmp_path)

    assert refused.returncode != 0 and refused.stdout == ""  # nothing served
    assert "does not hand a tools/call's idempotencyKey to an Extension" in refused.stderr.splitlines()[0]
