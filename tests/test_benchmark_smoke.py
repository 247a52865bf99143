"""The benchmark harness, run on tiny counts: it must finish every section, not measure anything."""

import os
import re
import subprocess
import sys

import pytest
from wire import ROOT

# Two minutes or so for the two (some thirty servers and an issuer start): in the slow set.
# serial: the benchmark's timing loops, so CI runs it alone.
pytestmark = [pytest.mark.targets("1x-stdio", "2x-stdio", "2x-http"), pytest.mark.slow, pytest.mark.serial]

BENCH = ROOT / "benchmarks" / "bench.py"
# Counts that take the harness through every section in well under a minute.
TINY = [
    "--calls",
    "5",
    "--repeats",
    "2",
    "--records",
    "20",
    "--in-flight",
    "10",
    "--clients",
    "2",
    "--scale-calls",
    "8",
    "--held",
    "3",
]
SECTIONS = [
    "## 1a. Round trip per target",
    "## 1b. Round trip per target",
    "## 2a. Fingerprint cost",
    "## 2b. The fingerprint's digest alone",
    "## 3. Memory",
    "## 4. Concurrency",
    "## 5a. Stores: round trip",
    "## 5b. Stores: round trips of one call of each kind, counted",
    "## 5c. Shared stores: bytes per stored record",
    "## 5d. Shared stores: 4 instances",
    "## 6a. Authorisation: round trip",
    "## 6b. Authorisation: keyed over unkeyed",
    "## 7. Tuning choices",
    "## 8. A principal's share",
    "## 9. Another principal's key",
]
POSTGRES = os.environ.get("SEP3182_POSTGRES")


def bench(*args: str) -> subprocess.CompletedProcess:
    """Run bench.py with the tiny counts and `args`, tests/ and the project on PYTHONPATH as it asks; it must exit 0."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, str(BENCH), *TINY, *args], capture_output=True, text=True, timeout=290, env=environment
    )
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.timeout(300)  # some thirty servers and an issuer start, two at a time on a two-core machine
def test_benchmark_harness_runs_every_section_on_tiny_counts(tmp_path):
    """Every section without PostgreSQL: its rows say so, and --write keeps what was printed."""
    results = tmp_path / "RESULTS.md"
    run = bench("--postgres", "", "--write", str(results))
    for heading in SECTIONS:
        assert heading in run.stdout
    assert "not measured (no PostgreSQL" in run.stdout
    assert "| memory, OAuth, --issuer | fresh key, executes |" in run.stdout
    assert "MISSED" in run.stdout or "MET" in run.stdout
    written = results.read_text(encoding="utf-8")
    assert written.startswith("# SEP-3182 idempotency benchmark")
    assert written.strip() == run.stdout.strip()


@pytest.mark.timeout(300)
@pytest.mark.skipif(not POSTGRES, reason="no PostgreSQL server: set SEP3182_POSTGRES (see tests/postgres.sh)")
def test_benchmark_measures_postgresql_when_given_a_server():
    """Sections 5 to 9 on the PostgreSQL server SEP3182_POSTGRES names, in databases the bench drops afterwards."""
    run = bench("--sections", "56789", "--postgres", POSTGRES)
    assert "not measured" not in run.stdout
    assert "| PostgreSQL | fresh key, executes |" in run.stdout
    assert re.search(r"\| PostgreSQL \| fresh key, executes \| \d+ \| \d+ \|", run.stdout)  # its trips, counted
    assert "| PostgreSQL, OAuth, --issuer | fresh key, executes |" in run.stdout
    assert "| PostgreSQL | lazy savepoints" in run.stdout
    assert re.search(r"\| PostgreSQL \| \d\.\d{3} \| \d\.\d{3} \|", run.stdout)  # section 8's row
