"""The benchmark harness, run on tiny counts: it must finish, not measure anything."""

import subprocess
import sys

from wire import ROOT

BENCH = ROOT / "benchmarks" / "bench.py"
# Counts that take the harness through every section in a few seconds.
TINY = ["--calls", "5", "--repeats", "2", "--records", "20", "--in-flight", "10"]
SECTIONS = ["## 1. Round trip over stdio", "## 2. Fingerprint cost", "## 3. Memory", "## 4. Concurrency"]


def test_benchmark_harness_runs_end_to_end_on_tiny_counts():
    run = subprocess.run([sys.executable, str(BENCH), *TINY], capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stderr
    for heading in SECTIONS:
        assert heading in run.stdout
