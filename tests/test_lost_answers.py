"""The package README's client form, unchanged, survives every way an answer is lost over Streamable HTTP.

The README's code block is played as it is written (only its URL pointed at the test's server) in the mcp 2.x
environment, against the demo's ledger server over Streamable HTTP:
- through tests/lossy_proxy.py, which lets the keyed charge run and record and then loses its answer: a reset
  before the headers, a body cut after them (a JSON body, an SSE stream), or no answer at all (hold);
- straight to the server, which is killed (SIGKILL) mid-charge and restarted on its SQLite store: the restarted
  server takes the dead holder's key over once its lease (advertised, 2 s) has passed.
Each time the call returns the charge's result, no exception, and the ledger moved once. So do the other forms
over HTTP: a URL alone, a function giving a new Client (over a transport the caller built) for each attempt, and
a Client on the 2025 handshake."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wire import ROOT, HttpWire, free_port, sdk2_python

pytestmark = pytest.mark.targets("2x-http")

README = ROOT / "idempotency" / "README.md"
PROXY = ROOT / "tests" / "lossy_proxy.py"
README_URL = "http://127.0.0.1:8000/mcp"


def readme_client() -> str:
    """The README's client form: the first Python block of its section "The client half", as written."""
    section = README.read_text().split("## The client half", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None and README_URL in block.group(1), "the README's client form has moved"
    return block.group(1)


def script_for(url: str) -> str:
    """The README's client form pointed at `url`, in a function of its own; it prints what the call returned."""
    body = readme_client().replace(README_URL, url)
    return "\n".join(
        [
            "import anyio, json",
            "async def main():",
            *(f"    {line}" for line in body.splitlines()),
            "    print(json.dumps({'text': result.content[0].text, 'error': result.is_error}), flush=True)",
            "anyio.run(main)",
        ]
    )


def played(url: str) -> subprocess.CompletedProcess:
    """The README's client form run against `url` to its end."""
    return subprocess.run([sdk2_python(), "-c", script_for(url)], capture_output=True, text=True, timeout=120, cwd=ROOT)


def answer_of(run: subprocess.CompletedProcess) -> dict:
    """What the README's form returned; the test fails with its stderr if it raised."""
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def ledger_server(port: int, *options: str) -> list[str]:
    """The demo's ledger server over Streamable HTTP on `port`, in the package's default placement."""
    return [
        sdk2_python(),
        "-m",
        "mcp_idempotency_demo.ledger_server",
        "--verbose",
        "--transport",
        "http",
        "--port",
        str(port),
        "--placement",
        "meta",
        *options,
    ]


class LossyProxy:
    """tests/lossy_proxy.py in front of a server, losing the first charge's answer in one way."""

    def __init__(self, upstream: int, mode: str):
        self.process = subprocess.Popen(
            [sys.executable, str(PROXY), str(upstream), mode, "charge_guarded"], stdout=subprocess.PIPE, text=True
        )
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().split()[-1]}/mcp"

    def losses(self) -> list[str]:
        """What it said it lost, once stopped."""
        self.process.terminate()
        return [line.strip() for line in self.process.communicate(timeout=10)[0].splitlines()]

    def __enter__(self) -> "LossyProxy":
        return self

    def __exit__(self, *exc_info) -> None:
        """Stopped, whatever the test found."""
        self.process.kill()
        self.process.wait()


def lost_and_retried(tmp_path: Path, mode: str, *server_options: str) -> None:
    """The README's form through a proxy losing the charge's answer in `mode`: its result, one charge."""
    port = free_port()
    store = f"sqlite:{tmp_path / 'store.db'}"
    server = HttpWire("2x-http", ledger_server(port, "--store", store, *server_options), port)
    try:
        with LossyProxy(port, mode) as proxy:
            answer = answer_of(played(proxy.url))
            assert proxy.losses() == [f"lost charge_guarded: {mode}"]  # the answer was lost, once, as asked
        assert answer == {"text": "Charged 100. New balance: 100", "error": False}
        assert server.ledger() == {"balance": 100, "charges": 1}
        assert server.log().count("claimed: key=") == 1 and "replayed: key=" in server.log()
    finally:
        server.close()


@pytest.mark.parametrize(
    ("mode", "server_options"),
    [
        pytest.param("reset", (), id="reset_before_the_headers"),
        pytest.param("cut", (), id="json_body_cut_after_the_headers"),
        pytest.param("cut", ("--sse",), id="sse_stream_cut_after_the_headers"),
    ],
)
def test_the_readme_client_returns_the_result_of_a_call_whose_answer_was_lost_and_the_ledger_moved_once(
    tmp_path, mode, server_options
):
    lost_and_retried(tmp_path, mode, *server_options)


OTHER_FORMS = """
import json, sys
import anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_idempotency.client import call_tool, discover_settings

async def main(url, form):
    if form == "url":  # no Client at all: call_tool opens a connection for each attempt
        settings = await discover_settings(url)
        result = await call_tool(url, "charge_guarded", {"amount": 100}, settings=settings)
    elif form == "client-factory":  # a function giving a new Client: each attempt opens one, and closes it
        # over a transport built here, on one HTTP client carrying credentials, as an authorised caller builds it
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer not-checked-here"}) as http:
            def connect():
                return Client(streamable_http_client(url, http_client=http))
            settings = await discover_settings(connect)
            result = await call_tool(connect, "charge_guarded", {"amount": 100}, settings=settings)
    else:  # a Client on the 2025 handshake: each attempt's connection makes its own
        async with Client(url, mode="legacy") as client:
            settings = await discover_settings(client)
            result = await call_tool(client, "charge_guarded", {"amount": 100}, settings=settings)
    print(json.dumps({"text": result.content[0].text, "error": result.is_error}), flush=True)

anyio.run(main, *sys.argv[1:])
"""


@pytest.mark.parametrize("form", ["url", "client-factory", "legacy"])
def test_a_url_a_function_giving_clients_or_a_2025_client_survives_a_reset_answer_and_the_ledger_moved_once(
    tmp_path, form
):
    port = free_port()
    server = HttpWire("2x-http", ledger_server(port, "--store", f"sqlite:{tmp_path / 'store.db'}"), port)
    try:
        with LossyProxy(port, "reset") as proxy:
            run = subprocess.run(
                [sdk2_python(), "-c", OTHER_FORMS, proxy.url, form], capture_output=True, text=True, timeout=120
            )
            assert proxy.losses() == ["lost charge_guarded: reset"]
        assert answer_of(run) == {"text": "Charged 100. New balance: 100", "error": False}
        assert server.ledger() == {"balance": 100, "charges": 1}
    finally:
        server.close()


@pytest.mark.slow  # the README's form waits out its default 30 s attempt before it retries
def test_the_readme_client_returns_the_result_of_a_call_whose_answer_never_came_and_the_ledger_moved_once(tmp_path):
    lost_and_retried(tmp_path, "hold")


@pytest.mark.slow  # a SIGKILL, a restart and a lease waited out
def test_a_server_killed_mid_call_and_restarted_is_retried_to_one_effect_by_the_default_policy(tmp_path):
    port = free_port()
    command = ledger_server(port, "--store", f"sqlite:{tmp_path / 'store.db'}", "--lease", "2", "--charge-delay", "3")
    servers = [HttpWire("2x-http", command, port)]
    assert servers[0].capabilities["extensions"]["com.example.sep3182/idempotency"]["leaseSeconds"] == 2
    client = subprocess.Popen(
        [sdk2_python(), "-c", script_for(f"http://127.0.0.1:{port}/mcp")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        servers[0].wait_for_log("claimed: key=")  # the charge is running: it sleeps 3 s before its unit of work
        servers[0].process.kill()
        servers[0].process.wait()
        servers.append(HttpWire("2x-http", command, port))  # the same store, the same port
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1]) == {"text": "Charged 100. New balance: 100", "error": False}
        assert servers[1].ledger() == {"balance": 100, "charges": 1}  # the killed run charged nothing; one ran
        assert "claimed: key=" in servers[1].log()  # the same key, taken over once the dead holder's lease passed
    finally:
        client.kill()
        for server in servers:
            server.close()
