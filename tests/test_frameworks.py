"""P34: in each agent framework, the key belongs to the runtime. Through the framework's own extension point, the
integration mints one key per tool call, resends that request when its answer is lost, before the framework or
the model sees a failure, and the model is never shown the key.

Each case runs the real framework, in an environment of its own (tests/framework_envs.py), against the 2.x ledger
server over HTTP whose charge outlasts the integration's per-attempt timeout: the first answer is lost, the same
request comes back (in progress while the charge runs, then replayed), and get_balance counts one charge. The
models are the frameworks' test doubles or a scripted one: no network, no LLM.
"""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from framework_envs import framework_python
from gateway_runs import ROUTES, server_command
from kit_targets import http_process, listening
from wire import ROOT, SDK2_SERVER, sdk2_python

# In the slow set, which CI runs; the first test to need an environment makes it (minutes, within its timeout).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
CHARGE_SECONDS = "2.5"  # the server's charge; each driver gives an attempt 1 s
# framework: its environment, and the placement it can send the key in (langchain-mcp-adapters cannot set _meta)
FRAMEWORKS = {
    "fastmcp": ("agents", "meta"),
    "pydantic_ai": ("agents", "meta"),
    "openai_agents": ("agents", "meta"),
    "langchain": ("langchain", "argument"),
}


def played(framework: str, *server_options: str, attempts: int = 12) -> tuple[dict, str]:
    """The driver's report (what the model was shown, the tool's answer, the ledger) and the server's decision log."""
    _, placement = FRAMEWORKS[framework]
    server = [sdk2_python(), *SDK2_SERVER, "--store", "memory", "--verbose", "--placement", placement]
    with http_process([*server, *server_options]) as started:
        report = driven(framework, listening(*started), attempts)
        log = started[3]
        log.seek(0)
        decisions = log.read().decode()
    return report, decisions


def driven(framework: str, url: str, attempts: int) -> dict:
    """The framework's driver run once against `url` in its environment: its report."""
    python = framework_python(FRAMEWORKS[framework][0])
    driver = ROOT / "tests" / "frameworks" / f"{framework}_driver.py"
    ran = subprocess.run([python, str(driver), url, str(attempts)], capture_output=True, text=True, timeout=90)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.targets("2x-http")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_lost_answer_is_resent_with_its_key_inside_the_framework_and_charges_once_unseen_by_the_model(framework):
    report, decisions = played(framework, "--charge-delay", CHARGE_SECONDS)
    claimed = re.findall(r"claimed: key='([^']+)' tool=charge_guarded", decisions)
    assert len(claimed) == 1, decisions[-3000:]  # one logical call, one key
    key = claimed[0]
    assert re.findall(r"replayed: key='([^']+)'", decisions) == [key]  # the lost answer's request, sent again
    assert report["charges"] == 1
    assert "Charged 7. New balance: 7" in report["result"]  # the replay reached the model as the tool's answer
    shown = json.dumps(report["shown"])
    assert report["shown"] and key not in shown and key not in report["result"]
    assert "x-mcp-idempotency-key" not in shown  # nor a property it would be asked to fill


@pytest.mark.targets("2x-http")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_key_the_server_refuses_for_good_reaches_the_model_as_a_tool_error_and_is_never_resent(framework):
    report, decisions = played(framework, "--max-key-length", "16")  # shorter than the integrations' keys
    assert decisions.count("invalid key:") == 1, decisions[-3000:]  # refused once, and not sent again
    assert "claimed:" not in decisions and report["charges"] == 0
    assert "efused" in report["result"] and "Charged" not in report["result"]  # Refused, or "The server refused"


@pytest.mark.targets("2x-http")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_call_unanswered_after_the_last_attempt_reaches_the_model_as_a_tool_error_saying_so(framework):
    report, decisions = played(framework, "--charge-delay", "15", attempts=3)  # three 1 s attempts, all in the charge
    claimed = re.findall(r"claimed: key='([^']+)'", decisions)
    assert len(claimed) == 1 and decisions.count(f"in progress: key={claimed[0]!r}") == 2, decisions[-3000:]
    assert "replayed:" not in decisions  # the charge was still running when the integration gave up
    assert "after 3 attempts" in report["result"] and "Charged" not in report["result"]


@pytest.mark.targets("2x-http")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_behind_a_gateway_that_flattens_rejections_into_tool_errors_the_integration_still_waits_for_the_answer(
    framework,
):
    # fastmcp's proxy turns the server's "still running" rejection into an isError text result: the integration
    # must read it as that rejection (the client half's reading, which every integration shares), not as the answer.
    with tempfile.TemporaryDirectory(prefix="sep3182-gateway-") as folder:
        log = Path(folder) / "server.log"
        log.touch()
        server = server_command(FRAMEWORKS[framework][1], log, "--charge-delay", CHARGE_SECONDS)
        with ROUTES["fastmcp proxy"](server) as gateway:
            report = driven(framework, f"http://127.0.0.1:{gateway.port}/mcp", 12)
            ledger = gateway.ledger()
        said = log.read_text()
    assert len(re.findall(r"claimed: key=", said)) == 1, said
    assert "in progress: key=" in said, f"no retry met the running charge, so nothing was tested:\n{said}"
    assert "replayed: key=" in said, f"the integration took the flattened rejection for the answer:\n{said}"
    assert "Charged 7. New balance: 7" in report["result"] and ledger["charges"] == 1


# Each environment: the integrations it type-checks, against the frameworks installed there (the library's own
# mypy run leaves them out, having none of the frameworks).
INTEGRATIONS = {"agents": ["fastmcp", "pydantic_ai", "openai_agents"], "langchain": ["langchain"]}


@pytest.mark.parametrize("environment", INTEGRATIONS)
def test_the_integrations_type_check_strict_against_the_frameworks_they_import(environment):
    python = framework_python(environment)
    files = [f"mcp_idempotency/integrations/{name}.py" for name in INTEGRATIONS[environment]]
    mypy = [python, "-m", "mypy", "--config-file", "pyproject.toml", "--no-incremental", *files]
    checked = subprocess.run(mypy, capture_output=True, text=True, timeout=300, cwd=ROOT / "idempotency")
    assert checked.returncode == 0, checked.stdout[-3000:]
