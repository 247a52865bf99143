"""The suite measures itself: cosmic-ray mutates the rules and the unit of work, and the in-process tests must notice.

    python3 tests/mutation/run.py      mutate, test each mutant, report (resumes a session left unfinished; ~25 min)

It needs the suite's environments first (`python3 tests/run.py --co -q` makes them), and makes its own,
tests/mutation/.venv, for cosmic-ray alone (requirements.txt here): nothing else installs it, and CI
never runs this. cosmic-ray.toml here says which files are mutated and which tests judge each mutant.

cosmic-ray writes each mutant into the source file itself and puts it back after its tests; so this
refuses to start on uncommitted changes under idempotency/mcp_idempotency/, and after a run killed
outright, `git checkout idempotency/` undoes the mutant it left. The session (tests/mutation/session.db)
keeps every result: run again to finish it, delete it to start over.
"""

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = ROOT / "tests" / "mutation"
CONFIG = str(HERE / "cosmic-ray.toml")
SESSION = HERE / "session.db"
TOOLS = HERE / ".venv" / "bin"
MUTATED = "idempotency/mcp_idempotency"


def tool_environment() -> None:
    """tests/mutation/.venv with the pinned cosmic-ray, made if missing."""
    if not (TOOLS / "cosmic-ray").exists():
        venv.create(HERE / ".venv", with_pip=True)
        subprocess.run([str(TOOLS / "pip"), "install", "-q", "-r", str(HERE / "requirements.txt")], check=True)


def source_is_clean() -> bool:
    """Is the source to be mutated as committed, so that what the run leaves behind is easy to see and undo?"""
    return subprocess.run(["git", "diff", "--quiet", "HEAD", "--", MUTATED], cwd=ROOT).returncode == 0


def run(*command: str) -> None:
    """One cosmic-ray command, in the repository's root, the package imported from its source."""
    # The tests' .venv holds the package as a wheel: idempotency/ first on the path makes them import
    # the mutated source instead.
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "idempotency")}
    subprocess.run([str(TOOLS / command[0]), *command[1:]], cwd=ROOT, env=environment, check=True)


def new_session() -> None:
    """Every mutant listed, those the configuration leaves out marked skipped, the tests seen to pass unmutated."""
    run("cosmic-ray", "init", CONFIG, str(SESSION))
    run("cr-filter-operators", str(SESSION), CONFIG)
    run("cosmic-ray", "baseline", CONFIG)  # a test command that fails anyway would count every mutant killed


def main() -> None:
    """Make the tool's environment, then mutate and test what is pending in the session, then report."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        sys.exit("no .venv: make the suite's environments first with: python3 tests/run.py --co -q")
    if not source_is_clean():
        sys.exit(f"{MUTATED} has uncommitted changes: commit or stash them first (a mutant left behind would hide)")
    tool_environment()
    if not SESSION.exists():
        new_session()
    run("cosmic-ray", "exec", CONFIG, str(SESSION))
    run("cr-report", str(SESSION))


if __name__ == "__main__":
    main()
