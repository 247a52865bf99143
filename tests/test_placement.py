"""P26: the key as an extension beside the SEP's field, one placement at a time.

The 2.x ledger server started with `--placement meta` (its default) reads the key from request
`params._meta["com.example.sep3182/idempotencyKey"]` and advertises
`capabilities.extensions["com.example.sep3182/idempotency"]`; with `--placement params` it
reads `params.idempotencyKey` and advertises `capabilities.tools.idempotency`; with
`--placement argument` charge_guarded declares the key as its argument `idempotency_key`,
marked `"x-mcp-idempotency-key": true` in its inputSchema, and nothing is advertised. Each
placement is the same layer, so replay, conflict and in progress hold in both; a key
in the other place is no key (P1 for that placement). The names are spelled here as
the wire carries them, not imported from the server: the tests check the contract.
"""

import json
import subprocess
import sys
import time

import kit_targets
import placement_table
import pytest
from wire import CONFLICT, IN_PROGRESS, INVALID_KEY, SDK2_SERVER, Wire, error_type, new_key, sdk2_python, start

EXTENSION_ID = "com.example.sep3182/idempotency"
META_KEY = "com.example.sep3182/idempotencyKey"
# P11' at the default window (P8), with the default run bounds (P31)
SETTINGS = {"maxKeyLength": 255, "retentionSeconds": 86400, "deadlineSeconds": 600, "leaseSeconds": 30}
CHARGE_DELAY = 0.8  # seconds: long enough to send a second call while the first one charges

pytestmark = pytest.mark.targets("2x-stdio", "2x-http")


# The placements are the layer's, which either transport reaches alike: the quick set plays them over HTTP, the slow
# set over stdio too.
@pytest.fixture(scope="module", params=[pytest.param("2x-stdio", marks=pytest.mark.slow), "2x-http"])
def server_target(request) -> str:
    """Both 2.x transports; named apart from conftest's `target`, which is chosen per test, not per module."""
    return request.param


@pytest.fixture(scope="module")
def meta_server(server_target):
    """The ledger server in the extension placement, its charges slow enough to catch one in flight."""
    wire = start(server_target, "--placement", "meta", "--charge-delay", str(CHARGE_DELAY))
    yield wire
    wire.close()


@pytest.fixture(scope="module")
def params_server(server_target):
    """The ledger server in the SEP's field placement (wire.start names it: the server's default is _meta)."""
    wire = start(server_target)
    yield wire
    wire.close()


def meta_charge(wire: Wire, key, amount: int = 100, **meta) -> int:
    """Send a charge with `key` in the extension's _meta key (and any other _meta members); its id."""
    return wire.send_call("charge_guarded", {"amount": amount}, _meta={META_KEY: key, **meta})


def charges(wire: Wire) -> int:
    """How many charges the ledger holds: ground truth, read without a key."""
    return wire.ledger()["charges"]


def capabilities(wire: Wire) -> dict:
    """What server/discover advertises."""
    return wire.request("server/discover", {})["result"]["capabilities"]


# ----------------------------------------------------------------------------
# The extension placement keeps every rule of the SEP's
# ----------------------------------------------------------------------------


def test_meta_placement_replays_a_finished_call_without_charging_again(meta_server):
    before, key = charges(meta_server), new_key()
    first = meta_server.reply(meta_charge(meta_server, key))
    # E1: the fingerprint ignores _meta, so another progress token is still the same request.
    retry = meta_server.reply(meta_charge(meta_server, key, progressToken="another"))
    assert "result" in first and not first["result"].get("isError"), first
    assert retry["result"] == first["result"]
    assert charges(meta_server) == before + 1


def test_meta_placement_rejects_the_key_reused_with_other_arguments(meta_server):
    before, key = charges(meta_server), new_key()
    meta_server.reply(meta_charge(meta_server, key, amount=100))
    reused = meta_server.reply(meta_charge(meta_server, key, amount=200))
    assert error_type(reused) == CONFLICT, reused
    assert reused["error"]["data"]["idempotencyKey"] == key
    assert charges(meta_server) == before + 1


def test_meta_placement_runs_every_call_with_a_key_in_params(meta_server):
    before, key = charges(meta_server), new_key()
    for _ in range(2):
        answer = meta_server.charge(100, key=key)
        assert "result" in answer and not answer["result"].get("isError"), answer
    assert charges(meta_server) == before + 2


def test_params_placement_runs_every_call_with_a_key_in_meta(params_server):
    before, key = charges(params_server), new_key()
    for _ in range(2):
        answer = params_server.reply(meta_charge(params_server, key))
        assert "result" in answer and not answer["result"].get("isError"), answer
    assert charges(params_server) == before + 2


def test_params_placement_still_replays_a_key_in_params(params_server):
    before, key = charges(params_server), new_key()
    first, retry = params_server.charge(100, key=key), params_server.charge(100, key=key)
    assert retry["result"] == first["result"]
    assert charges(params_server) == before + 1


# ----------------------------------------------------------------------------
# The declared argument: the tool's marked property is the key, and not part of the request
# ----------------------------------------------------------------------------

MARK = "x-mcp-idempotency-key"


@pytest.fixture(scope="module")
def argument_server(server_target):
    """The ledger server in the argument placement, its charges slow enough to catch one in flight."""
    wire = start(server_target, "--placement", "argument", "--charge-delay", str(CHARGE_DELAY))
    yield wire
    wire.close()


def argument_charge(wire: Wire, key, amount: int = 100, tool: str = "charge_guarded") -> int:
    """Send a charge with `key` in the argument charge_guarded marks; its id."""
    return wire.send_call(tool, {"amount": amount, "idempotency_key": key})


# The server of each placement that is not the field's, and how a charge carries its key there.
KEYED_CHARGES = {"meta": ("meta_server", meta_charge), "argument": ("argument_server", argument_charge)}


@pytest.mark.parametrize("placement", KEYED_CHARGES)
def test_each_placement_rejects_at_once_a_repeat_of_a_call_still_running(placement, server_target, request):
    fixture, keyed_charge = KEYED_CHARGES[placement]  # on each transport (server_target)
    server = request.getfixturevalue(fixture)
    before, key = charges(server), new_key()
    running = keyed_charge(server, key)
    time.sleep(CHARGE_DELAY / 4)  # the first call has claimed the key and is charging
    started = time.monotonic()
    repeat = server.reply(keyed_charge(server, key))
    assert error_type(repeat) == IN_PROGRESS, repeat
    assert time.monotonic() - started < CHARGE_DELAY  # S1: rejected at once, not after the charge
    assert "result" in server.reply(running)
    assert charges(server) == before + 1


@pytest.mark.parametrize("placement", KEYED_CHARGES)
def test_each_placement_refuses_an_invalid_key_and_runs_nothing(placement, server_target, request):
    fixture, keyed_charge = KEYED_CHARGES[placement]  # on each transport (server_target)
    server = request.getfixturevalue(fixture)
    before = charges(server)
    refused = server.reply(keyed_charge(server, "k" * 256))
    assert error_type(refused) == INVALID_KEY, refused
    assert charges(server) == before


def test_argument_placement_marks_one_property_of_the_charge_tool_and_no_other_tool(argument_server):
    tools = {tool["name"]: tool for tool in argument_server.request("tools/list", {})["result"]["tools"]}
    marked = {
        name: [prop for prop, schema in tool["inputSchema"].get("properties", {}).items() if schema.get(MARK)]
        for name, tool in tools.items()
    }
    assert marked.pop("charge_guarded") == ["idempotency_key"], tools["charge_guarded"]
    declared = tools["charge_guarded"]["inputSchema"]["properties"]["idempotency_key"]
    assert {"type": "string", "maxLength": 255} in declared["anyOf"], declared  # optional: a string, or null
    assert not any(marked.values()), marked


def test_argument_placement_replays_a_finished_call_without_charging_again(argument_server):
    before, key = charges(argument_server), new_key()
    first = argument_server.reply(argument_charge(argument_server, key))
    retry = argument_server.reply(argument_charge(argument_server, key))
    assert "result" in first and not first["result"].get("isError"), first
    assert retry["result"] == first["result"]
    assert charges(argument_server) == before + 1


def test_argument_placement_rejects_the_key_reused_with_other_arguments(argument_server):
    before, key = charges(argument_server), new_key()
    argument_server.reply(argument_charge(argument_server, key, amount=100))
    reused = argument_server.reply(argument_charge(argument_server, key, amount=200))
    assert error_type(reused) == CONFLICT, reused
    assert charges(argument_server) == before + 1


def test_argument_placement_runs_every_call_with_a_key_in_params_or_meta(argument_server):
    before, key = charges(argument_server), new_key()
    for _ in range(2):
        for answer in (argument_server.charge(100, key=key), argument_server.reply(meta_charge(argument_server, key))):
            assert "result" in answer and not answer["result"].get("isError"), answer
    assert charges(argument_server) == before + 4


def test_argument_placement_runs_every_call_of_a_tool_without_the_mark(argument_server):
    before, key = charges(argument_server), new_key()
    for _ in range(2):
        answer = argument_server.reply(argument_charge(argument_server, key, tool="charge_unguarded"))
        assert "result" in answer and not answer["result"].get("isError"), answer
    assert charges(argument_server) == before + 2


def test_argument_placement_advertises_neither_capability(argument_server):
    advertised = capabilities(argument_server)
    assert "idempotency" not in advertised.get("tools", {}), advertised
    assert EXTENSION_ID not in (advertised.get("extensions") or {}), advertised


# ----------------------------------------------------------------------------
# C1, P26: the capability where the placement puts it, and only there
# ----------------------------------------------------------------------------


def test_meta_placement_advertises_the_extension_and_not_tools_idempotency(meta_server):
    advertised = capabilities(meta_server)
    assert advertised["extensions"][EXTENSION_ID] == SETTINGS
    assert "idempotency" not in advertised.get("tools", {}), advertised


def test_params_placement_advertises_tools_idempotency_and_not_the_extension(params_server):
    advertised = capabilities(params_server)
    assert advertised["tools"]["idempotency"] == SETTINGS
    assert EXTENSION_ID not in (advertised.get("extensions") or {}), advertised


def test_an_unknown_placement_is_refused_before_anything_serves(tmp_path):
    refused = subprocess.run(
        [sdk2_python(), *SDK2_SERVER, "--placement", "header", "--store", f"sqlite:{tmp_path / 'store.db'}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused
    assert "--placement" in refused.stderr and "header" in refused.stderr
    assert refused.stdout == ""  # nothing served
    assert not (tmp_path / "store.db").exists()  # nothing opened


# ----------------------------------------------------------------------------
# The kit in either placement (conformance/kit.py --placement; the full runs are test_kit.py's, slow)
# ----------------------------------------------------------------------------

# A few checks that between them take every path the placement changes: the capability, a key set by
# the kit's calls, one written as raw text (serialisation), one on another method, and the other place.
KIT_CHECKS = [
    "sep-3182-capability-declared",
    "sep-3182-capability-settings",
    "sep-3182-repeat-executes-once",
    "sep-3182-conflict-rejected",
    "sep-3182-equivalence-serialisation",
    "sep-3182-key-only-in-params",
    "sep-3182-other-methods-ignore-the-key",
]


# The 2.x server over stdio reads _meta as over HTTP (the layer's doing): the slow set runs the kit there.
STDIO_SLOW = pytest.param("2x-stdio-meta", marks=pytest.mark.slow)


@pytest.mark.parametrize("name", [STDIO_SLOW, "2x-http-meta", "ts-stdio-meta"])
def test_the_kit_in_meta_placement_passes_a_server_in_meta_placement(name):
    results, output = kit_targets.run_kit(name, KIT_CHECKS)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(KIT_CHECKS, "SUCCESS"), output


@pytest.mark.parametrize(
    ("kit_placement", "server_placement"), [("meta", "params"), ("params", "meta")], ids=["kit_meta", "kit_params"]
)
def test_the_kit_fails_a_server_whose_key_is_in_the_other_placement(tmp_path, kit_placement, server_placement):
    server = [*kit_targets.ledger_server(), "--placement", server_placement, "--store", f"sqlite:{tmp_path / 's.db'}"]
    checks = ["sep-3182-capability-declared", "sep-3182-repeat-executes-once"]
    ran = subprocess.run(
        [sys.executable, str(kit_targets.KIT), "--command", subprocess.list2cmdline(server)]
        + ["--placement", kit_placement, "--json", str(tmp_path / "checks.json")]
        + [option for check in checks for option in ("--check", check)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = json.loads((tmp_path / "checks.json").read_text(encoding="utf-8"))
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(checks, "FAILURE"), ran.stdout
    assert ran.returncode == 1, ran.stdout


# ----------------------------------------------------------------------------
# What each SDK keeps of each placement, measured (docs/placement.md)
# ----------------------------------------------------------------------------


def test_the_placement_table_is_what_the_sdks_do():
    python, typescript = placement_table.measured_python(), placement_table.measured_typescript()
    # The findings the Working Group paragraph rests on, read from the run itself:
    assert python["rows"]["meta"]["sent"] and python["rows"]["meta"]["intercept_tool_call"]
    assert python["rows"]["params"]["intercept_raw_params"]  # an Extension reads the SEP's key from ctx.params
    assert not python["rows"]["params"]["sent"]  # mcp 2.x's stock client drops the SEP's field
    assert python["rows"]["params"]["capability_typed"] is None  # and its typed capabilities drop tools.idempotency
    # The options' measured cells: a gateway re-sending the typed request keeps _meta and arguments, not the
    # field; a client that knows nothing sends no key; only the declared argument is in the model's tool list.
    gateway = {placement: row["through_a_gateway"] for placement, row in python["rows"].items()}
    assert gateway == {"params": False, "meta": True, "argument": True}
    assert not any(row["unaware_client_sends_a_key"] for row in python["rows"].values())
    in_the_tool_list = {
        placement: row["marked_property_in_the_stock_tool_list"] for placement, row in python["rows"].items()
    }
    assert in_the_tool_list == {"params": False, "meta": False, "argument": True}
    assert python["rows"]["argument"]["sent"] and python["rows"]["argument"]["intercept_tool_call"]
    assert python["mirrored_headers"] == {"mcp-param-idempotency-key": "measured-key"}  # what a gateway can read
    for placement in ("params", "meta"):
        assert typescript["rows"][placement]["client_v2"]["sent"], placement
    for server in ("server_v1", "server_v2"):  # sdk 1.32.2's McpServer, and @modelcontextprotocol/server 2.4.0's
        assert typescript["rows"]["params"][server]["transport"] and not typescript["rows"]["params"][server]["handler"]
        assert typescript["rows"]["meta"][server]["handler"], server
    # The declared argument on the TypeScript SDKs: both clients send it and keep the mark in their typed tool
    # list; both servers' zod schemas carry the mark into tools/list, and the tool callback gets the key.
    argument = typescript["rows"]["argument"]
    for client in ("client_v2", "client_v1"):
        assert argument[client]["sent"] and placement_table.marked(argument[client]["capability_typed"]), client
    for server in ("server_v1", "server_v2"):
        assert argument[server]["handler"], server
        assert argument[server]["capability_on_the_wire"] == {"type": "string", "maxLength": 255, MARK: True}, server
    # typescript/README.md, P25: the v2 server speaks 2026-07-28 and carries an input-required round trip.
    for placement in placement_table.TYPESCRIPT_PLACEMENTS:
        assert typescript["rows"][placement]["server_v2"]["protocol"] == ["2026-07-28"]
        assert typescript["rows"][placement]["server_v2"]["input_required"]
    # The doc holds exactly this run's table (python3 tests/placement_table.py --write brings it up to date).
    doc = placement_table.DOC.read_text(encoding="utf-8")
    measured = placement_table.table(python, typescript)
    assert kit_targets.with_table(placement_table.DOC, placement_table.MARKS, measured) == doc


def kit_run(tmp_path, server_options: list[str], checks: list[str]) -> tuple[subprocess.CompletedProcess, list]:
    """The kit, told no placement, against the ledger server started with `server_options`; its run and results."""
    server = [*kit_targets.ledger_server(), *server_options, "--store", f"sqlite:{tmp_path / 's.db'}"]
    ran = subprocess.run(
        [sys.executable, str(kit_targets.KIT), "--command", subprocess.list2cmdline(server)]
        + ["--json", str(tmp_path / "checks.json")]
        + [option for check in checks for option in ("--check", check)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return ran, json.loads((tmp_path / "checks.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("server_placement", [[], ["--placement", "params"]], ids=["server_default", "params"])
def test_the_kit_told_no_placement_uses_the_one_the_server_advertises(tmp_path, server_placement):
    checks = ["sep-3182-capability-declared", "sep-3182-repeat-executes-once"]
    ran, results = kit_run(tmp_path, server_placement, checks)
    assert {entry["id"]: entry["status"] for entry in results} == dict.fromkeys(checks, "SUCCESS"), ran.stdout
    assert ran.returncode == 0, ran.stdout


def test_the_kit_refuses_a_server_that_only_marks_key_arguments_as_a_wrong_setup(tmp_path):
    ran, results = kit_run(tmp_path, ["--placement", "argument"], ["sep-3182-capability-declared"])
    (fixture,) = [entry for entry in results if entry["status"] == "FAILURE"]
    assert "x-mcp-idempotency-key" in fixture["errorMessage"], ran.stdout
    assert ", 0 failed, " in ran.stdout.splitlines()[-1], ran.stdout  # no rule of the SEP was judged
