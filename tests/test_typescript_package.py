"""The TypeScript package, typescript/packages/mcp-idempotency, checked by the quick set as CI checks the Python one.

Its strict type check (its lint: tsc with every strict option, tests included) and its vitest suite: the rules and
the fingerprint corpus, the layer around a real McpServer, and the PostgreSQL store on the server SEP3182_POSTGRES
names (each of its tests makes a database of its own there). The build itself ran before the tests started
(tests/run.py, typescript_built), so a package that does not compile fails the run at once.
"""

import os
import subprocess

import pytest
from conftest import NO_POSTGRES, POSTGRES
from node_packages import PACKAGE, typescript_built


@pytest.fixture(scope="module")
def built():
    typescript_built()


def test_typescript_package_type_checks_strictly_tests_included(built):
    checked = subprocess.run(["npm", "run", "--silent", "lint"], cwd=PACKAGE, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_typescript_package_passes_its_own_tests_postgresql_included(built):
    if not POSTGRES:
        pytest.skip(NO_POSTGRES)
    environment = {**os.environ, "SEP3182_POSTGRES": POSTGRES, "CI": "1"}  # CI: vitest runs once, never watches
    tested = subprocess.run(
        ["npx", "vitest", "run", "--reporter=dot"], cwd=PACKAGE, env=environment, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-4000:]
    assert " skipped" not in tested.stdout and " todo" not in tested.stdout, tested.stdout[-2000:]
