"""The agent frameworks' environments, made from the project's own pinned files when a test first needs one.

They stay out of tests/run.py so the quick set never waits on them: the framework tests are in the
slow set, and each environment is made once and reused by every later run (and every pytest worker,
one at a time under its folder's lock). It is made again when its requirements file changes, and
the library is put in afresh, built from idempotency/, once per pytest run.
"""

import os
import subprocess
import sys
from pathlib import Path

from node_packages import one_at_a_time

ROOT = Path(__file__).resolve().parent.parent
# Each environment: its requirements file, and how the library goes in beside it.
ENVIRONMENTS = {
    # mcp 2.x: the library with its extras for these frameworks, so the extras must resolve beside the pins
    "agents": ("tests/requirements-agents.txt", ["./idempotency[fastmcp,pydantic-ai,openai-agents]"]),
    # mcp 1.x: the library without its dependencies, whose mcp 2.x cannot be installed beside the adapter's
    "langchain": ("tests/requirements-langchain.txt", []),
}


def framework_python(name: str) -> str:
    """The python of `.venv-<name>`, its pins installed and this run's library in it."""
    requirements, library = ENVIRONMENTS[name]
    folder = ROOT / f".venv-{name}"
    python = folder / "bin" / "python"
    stamp = folder / "installed-from.txt"  # the requirements the environment was made from, and the run that last
    wanted = (ROOT / requirements).read_text()  # put the library in: pytest-xdist's id for the run, or this process
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    with one_at_a_time(ROOT):
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        made, _, last_run = stamp.read_text().partition("\0") if stamp.exists() else ("", "", "")
        if made != wanted:
            pip(python, "-r", requirements)
        if made != wanted or last_run != run:
            pip(python, "--force-reinstall", "--no-deps", "./idempotency")  # this run's code, whatever its version
            if library:
                pip(python, *library)  # and its extras' dependencies, already met but for a new one
            stamp.write_text(f"{wanted}\0{run}")
    return str(python)


def pip(python: Path, *arguments: str) -> None:
    """`pip install` in the environment of `python`, from the repository's root."""
    subprocess.run([str(python), "-m", "pip", "install", "-q", *arguments], cwd=ROOT, check=True, timeout=900)
