"""Every test from a fresh clone: make the two environments the suite needs, then run pytest.

    python3 tests/run.py             the quick set: every test but the slow ones, in two processes (9 min on 2 cores)
    python3 tests/run.py -m slow     any pytest options replace the default -m "not slow" -n 2

The two SDKs cannot share one environment, so there are two: .venv (mcp 1.x, pytest)
runs pytest and server.py; .venv-2x (mcp 2.x) holds the package in idempotency/, with
its PostgreSQL and OAuth extras, and runs its servers, which the tests start as
subprocesses. pytest imports the package's stores and rules in process too, which
need no SDK, so .venv takes the package without its dependencies (mcp 2.x). Both are
made if missing and brought up to date. PostgreSQL tests need SEP3182_POSTGRES
(tests/postgres.sh starts a throwaway server), the pooler tests pgbouncer too.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Each environment: what pip installs in it, one list per pip command.
ENVIRONMENTS = {
    ".venv": [
        ["-r", "requirements.txt", "-r", "tests/requirements.txt"],
        ["--no-deps", "-e", "idempotency", "-e", "demos"],
    ],
    ".venv-2x": [["-e", "idempotency[postgres,auth]", "-e", "demos"]],
}


def prepared(folder: str, installs: list[list[str]]) -> Path:
    """A virtual environment in `folder` with each of `installs` done by pip; its python."""
    python = ROOT / folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ROOT / folder)], check=True)
    for install in installs:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *install], cwd=ROOT, check=True)
    return python


def main() -> None:
    """Prepare both environments, then run pytest in the first with the options given."""
    pythons = [prepared(folder, requirements) for folder, requirements in ENVIRONMENTS.items()]
    # Two pytest workers (pytest-xdist): most tests wait on a server's sleep or start, so two share two cores.
    options = sys.argv[1:] or ["-m", "not slow", "-n", "2"]
    sys.exit(subprocess.run([str(pythons[0]), "-m", "pytest", "tests", *options], cwd=ROOT).returncode)


if __name__ == "__main__":
    main()
