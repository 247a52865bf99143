"""The PostgreSQL store behind pgbouncer in transaction mode.

A transaction-mode pooler hands each transaction whichever server connection is
free, so nothing may rest on the session. The store learns it is behind one from
its URL (`?pooler=transaction`): it then sends no session settings, which pgbouncer
refuses at connect, but requires them on the database, and turns asyncpg's named
prepared statements off, which pgbouncer 1.18 loses between transactions.

These tests put Debian's pgbouncer (tests/pgbouncer.sh; 1.18) in front of the
PostgreSQL server SEP3182_POSTGRES names, with two server connections per database
for every instance behind it, and skip with one line without either. They are in the slow
set, which CI runs with the system's pgbouncer installed; the quick set skips nothing.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile

import pytest
from conftest import NO_POSTGRES, POSTGRES, postgres_database
from stores import decisions
from test_several_instances import check_each_key_charged_once, each_key_sent_to_two_instances_at_once, instances
from wire import ROOT, SDK2_SERVER, sdk2_python

# Slow set: pgbouncer comes from the system (CI installs it), not from a registry package.
pytestmark = [pytest.mark.targets("2x-http"), pytest.mark.slow]

PGBOUNCER = ROOT / "tests" / "pgbouncer.sh"
KEYS = 60  # each sent to both instances at once: 120 requests over two server connections
STARTUP_TIMEOUT = 60  # seconds for a server that should refuse to start
NEEDS_PGBOUNCER = "these tests also need pgbouncer (apt-get install pgbouncer), which tests/pgbouncer.sh starts"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def pooler():
    """pgbouncer in transaction mode in front of SEP3182_POSTGRES; a function from a direct URL to its pooled one."""
    if not POSTGRES:
        pytest.skip(f"{NO_POSTGRES}; {NEEDS_PGBOUNCER}")
    if not shutil.which("pgbouncer", path=os.environ["PATH"] + ":/usr/sbin"):
        pytest.skip(f"no pgbouncer: {NEEDS_PGBOUNCER} in front of SEP3182_POSTGRES")
    folder = tempfile.mkdtemp(prefix="pgbouncer-")
    pooled = subprocess.run(
        [PGBOUNCER, "start", folder, str(free_port()), POSTGRES], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield lambda direct: pooled.replace("/postgres?", "/" + direct.rsplit("/", 1)[1] + "?")
    finally:
        subprocess.run([PGBOUNCER, "stop", folder], check=True)
        shutil.rmtree(folder, ignore_errors=True)


def refusal(store: str) -> str:
    """What the 2.x server says when it will not start on `store`: its one line of stderr."""
    server = subprocess.run(
        [
            sdk2_python(),
            *SDK2_SERVER,
            "--placement",
            "params",
            "--transport",
            "http",
            "--port",
            str(free_port()),
            "--store",
            store,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert server.returncode != 0, f"the server started on {store}:\n{server.stderr}"
    lines = server.stderr.strip().splitlines()
    assert len(lines) == 1, f"more than one line:\n{server.stderr}"
    return lines[0]


def tables(direct: str) -> list[str]:
    """The tables the database holds, read directly."""
    listing = subprocess.run(
        ["psql", "-Atc", "SELECT tablename FROM pg_tables WHERE schemaname = 'public'", direct],
        check=True,
        capture_output=True,
        text=True,
    )
    return listing.stdout.split()


def run_the_fix(line: str, direct: str, pooled: str) -> None:
    """Do what a refusal says, as its operator would: its statements on a direct connection, then
    RECONNECT on pgbouncer's console, since its open server connections keep the old settings."""
    subprocess.run(["psql", "-q", "-c", re.search(r"database: (.*); then", line)[1], direct], check=True)
    console = pooled.split("?")[0].rsplit("/", 1)[0] + "/pgbouncer"
    subprocess.run(["psql", "-q", "-c", "RECONNECT", console], check=True)


def test_behind_a_pooler_a_database_without_the_settings_is_refused_in_one_line_that_sets_them(pooler):
    with postgres_database() as direct:
        # Without ?pooler=transaction, pgbouncer itself refuses the session settings.
        assert "unsupported startup parameter" in refusal(pooler(direct).replace("?pooler=transaction", ""))

        line = refusal(pooler(direct))
        assert "behind a pooler the store needs these settings on the database" in line
        assert tables(direct) == [], "a refused start created the schema"

        # The line is exactly what to run: after it, the server starts and serves behind the pooler.
        run_the_fix(line, direct, pooler(direct))
        with instances(("--store", pooler(direct))) as (server,):
            assert server.charge(100, key="order-1")["result"] == server.charge(100, key="order-1")["result"]
            assert server.ledger() == {"balance": 100, "charges": 1}


def test_behind_a_pooler_each_key_sent_to_two_instances_at_once_charges_once(pooler):
    with postgres_database() as direct:
        run_the_fix(refusal(pooler(direct)), direct, pooler(direct))
        with instances(*[("--store", pooler(direct))] * 2) as wires:
            answers = each_key_sent_to_two_instances_at_once(wires, KEYS)
            seen = decisions(*wires)
        check_each_key_charged_once(answers, seen, direct)
