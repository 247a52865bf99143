"""The 2.x clients of tests/ that use the package's client (mcp_idempotency.client), run as processes: each prints
a JSON report last."""

import json
import subprocess

from wire import ROOT, sdk2_python


def policy_client_report(client: str, *arguments: str, timeout: float = 90) -> dict:
    """Run tests/CLIENT on mcp 2.x, and return the JSON report it prints last."""
    ran = subprocess.run(
        [sdk2_python(), str(ROOT / "tests" / client), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])
