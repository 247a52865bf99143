"""A misconfigured layer fails where it is built, in one line that names the fix, and opens nothing."""

import json
import subprocess

import pytest
from wire import new_key, sdk2_python, start

BUILD = """
import json
import sys
{hide}
from mcp_idempotency.layer import Idempotency


def said(url):
    try:
        Idempotency(url)
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return "accepted"


print(json.dumps({{url: said(url) for url in json.loads(sys.argv[1])}}))
"""
NO_ASYNCPG = "sys.modules['asyncpg'] = None  # as on a machine where the extra was never installed"
REFUSED = ["redis://127.0.0.1/0", "sqlite:", "sqlite", "notes.db", "postgresql:notes", ""]
TAKEN = ["memory", "sqlite:notes.db", "postgresql://postgres@127.0.0.1/db"]


def built(urls: list[str], hide: str = "") -> dict[str, str]:
    """What building the layer on each of `urls` says, in turn, in one mcp 2.x process, with nothing served."""
    ran = subprocess.run(
        [sdk2_python(), "-c", BUILD.format(hide=hide), json.dumps(urls)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(ran.stdout)


@pytest.fixture(scope="module")
def said() -> dict[str, str]:
    """What building the layer says on each URL of this module: one process builds them all (a layer opens nothing
    when built, so one cannot change what the next says), not one process each."""
    return built(REFUSED + TAKEN)


@pytest.mark.parametrize("url", REFUSED, ids=repr)
def test_a_store_url_the_package_cannot_open_is_refused_when_the_layer_is_built(said, url):
    assert said[url] == (
        f"InvalidSetting: unknown store {url!r}: use memory, sqlite:PATH or postgresql://USER@HOST/DATABASE"
    )


def test_a_postgresql_store_without_its_driver_names_the_extra_to_install():
    url = "postgresql://postgres@127.0.0.1/db"
    assert built([url], hide=NO_ASYNCPG)[url] == (
        "ModuleNotFoundError: a postgresql:// store needs the asyncpg driver: pip install 'mcp-idempotency[postgres]'"
    )


@pytest.mark.parametrize("url", TAKEN)
def test_a_store_url_the_package_can_open_is_taken_without_opening_it(said, url):
    assert said[url] == "accepted"


WIRED = """
import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp_idempotency.layer import Idempotency

keys = Idempotency("memory")
server = MCPServer("s", {wiring})


async def main():
    try:
        async with Client(server, mode="legacy") as client:
            print("served:", (await client.list_tools()).tools)
    except Exception as error:
        while getattr(error, "exceptions", None):  # the client's task group wraps what the server answered
            error = error.exceptions[0]
        print("refused:", error)

anyio.run(main)
"""
EVERYTHING = "extensions=[keys], middleware=[keys.advertise], lifespan=keys.lifespan"


def served(wiring: str) -> subprocess.CompletedProcess:
    """A server wired to the layer as `wiring` says, and one client's handshake with it, in process."""
    return subprocess.run(
        [sdk2_python(), "-c", WIRED.format(wiring=wiring)], capture_output=True, text=True, timeout=60
    )


def test_a_layer_wired_in_full_serves():
    ran = served(EVERYTHING)
    assert ran.stdout.startswith("served: "), ran.stdout + ran.stderr


@pytest.mark.parametrize(
    "forgotten, fix",
    [
        ("lifespan=keys.lifespan", "the idempotency store was never opened: pass lifespan=keys.lifespan to MCPServer"),
        ("extensions=[keys]", "the idempotency layer never sees a tools/call: pass extensions=[keys] to MCPServer"),
        (
            "middleware=[keys.advertise]",
            "the idempotency capability is never advertised: pass middleware=[keys.advertise] to MCPServer",
        ),
    ],
    ids=["lifespan", "extensions", "middleware"],
)
def test_a_layer_wired_in_part_refuses_to_serve_before_advertising_anything_in_one_line_naming_the_fix(forgotten, fix):
    ran = served(", ".join(part for part in EVERYTHING.split(", ") if part != forgotten))
    assert ran.stdout.startswith("refused: ") and fix in ran.stdout, ran.stdout + ran.stderr
    assert fix in ran.stderr.splitlines()  # and said once, in one line, where the operator looks


SHARED = "served over HTTP without authorisation: every caller shares one key space"


@pytest.mark.targets("2x-http", "2x-stdio")
def test_http_without_authorisation_is_said_once_to_share_one_key_space(target):
    wire = start(target)
    try:
        for amount in (1, 2):
            assert "result" in wire.call("charge_guarded", {"amount": amount}, key=new_key())
        told = wire.log().count(SHARED)
    finally:
        wire.close()
    assert told == (1 if target == "2x-http" else 0), wire.log()  # stdio has one client: nothing to share
