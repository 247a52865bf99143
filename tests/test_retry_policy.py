"""retry/: one client retry policy on two unrelated tools, and the alternatives to a key in params, failing.

retry/scenarios.py runs in the mcp 2.x environment against the package's ledger server and
retry/mail_server.py over stdio; every verdict is read from the ledger or the outbox.
A stand-in policy that mints a new key for each attempt shows those verdicts can fail.
"""

import os
import subprocess

import pytest
from wire import ROOT, sdk2_python

pytestmark = [pytest.mark.targets("2x-stdio"), pytest.mark.slow]  # about 25 s a run

SCENARIOS = ROOT / "retry" / "scenarios.py"

# The policy with one change: every attempt carries a key of its own, as a client that
# mints its key inside the retry loop does. Each retry is then a new request. It imports
# scenarios from retry/, which PYTHONPATH names.
NEW_KEY_PER_ATTEMPT = """
from mcp_idempotency import client
from mcp_idempotency.rules import Placement
send_once = client.attempt
async def attempt(connection, request, timeout):
    sent = request.params.model_dump(by_alias=True, exclude_none=True)
    placement = Placement.PARAMS if "idempotencyKey" in sent else Placement.META
    request = client.keyed_request(sent["name"], sent.get("arguments", {}), client.new_key(), placement)
    return await send_once(connection, request, timeout)
client.attempt = attempt
import scenarios
scenarios.main()
"""


def play(*command: str, **env: str) -> subprocess.CompletedProcess:
    """Run retry/scenarios.py (or a stand-in) with the mcp 2.x interpreter, `env` added to the environment."""
    return subprocess.run(
        [sdk2_python(), *command], cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, **env}
    )


def verdicts(output: str) -> list[str]:
    """The PASS/FAIL word of each verdict, in order."""
    return [line.split()[0] for line in output.splitlines() if line.strip().startswith(("PASS", "FAIL"))]


def test_every_scenario_holds_its_verdict_and_the_run_exits_0():
    run = play(str(SCENARIOS))
    assert run.returncode == 0, run.stdout + run.stderr
    assert verdicts(run.stdout) == ["PASS"] * 8
    assert "8 of 8 verdicts held." in run.stdout


def test_a_policy_that_mints_a_key_per_attempt_charges_and_sends_twice():
    run = play("-c", NEW_KEY_PER_ATTEMPT, PYTHONPATH=str(SCENARIOS.parent))
    assert run.returncode == 1, run.stdout + run.stderr
    found = verdicts(run.stdout)
    # Each retry is a new request: the slow and the interrupted charge are charged again,
    # the lost e-mail sent again, the reused key is no conflict. The alternatives do not
    # use the policy, and still fail as they should.
    assert found == ["FAIL"] * 4 + ["PASS"] * 4, run.stdout
