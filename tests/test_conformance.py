"""CONFORMANCE.md stays true: every row is there, every test it names exists, and ran where it says."""

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TABLE = (HERE / "CONFORMANCE.md").read_text(encoding="utf-8")

# The rows of the SEP summary (section A) and the positions (sections B, B.2, B.3, and B.4 as built).
ROW_IDS = (
    [f"W{n}" for n in range(1, 9)]
    + [f"C{n}" for n in range(1, 7)]
    + ["S0", "S1", "S1a", "S2", "S2a", "S2b", "S3", "S3a", "S3b", "S4", "S5", "S6"]
    + [f"E{n}" for n in range(1, 9)]
    + [f"R{n}" for n in range(1, 8)]
    + [f"K{n}" for n in range(1, 5)]
    + [f"L{n}" for n in range(1, 8)]
    + ["A1"]
    + [f"P{n}" for n in range(1, 25)]
    + ["P26", "P27", "P28", "P29", "P30", "P31", "P33"]
    + ["P5'", "P6'", "P8'", "P9'", "P10'", "P10''", "P11'", "P12'", "P18'"]
    + ["P23'", "P28'", "P32"]
)
TEST_REFERENCE = re.compile(r"`(test_\w+\.py)::(test_\w+)`")
OTHER_CHECK = re.compile(r"`(interop/[\w.]+)`")


def table_rows() -> dict[str, list[str]]:
    """Row id -> the cells of its table line."""
    rows = {}
    for line in TABLE.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in ROW_IDS:
            rows[cells[0]] = cells
    return rows


def functions_defined_in(file_name: str) -> set[str]:
    """The names of the test functions defined in one test file."""
    tree = ast.parse((HERE / file_name).read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
    }


def collected() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """`file.py::test_name` -> the targets pytest collects it for, and -> its tiers (conftest's --print-targets)."""
    listing = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(HERE),
            "--collect-only",
            "-q",
            "--print-targets",
            "-p",
            "no:cacheprovider",
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    targets, tiers = defaultdict(set), defaultdict(set)
    for line in listing.stdout.splitlines():
        if line.startswith("targets "):
            _, test, tier, where = line.split(" ", 3)
            targets[test].update(filter(None, where.split(",")))
            tiers[test].add(tier)
    assert targets, listing.stdout + listing.stderr
    return targets, tiers


@pytest.fixture(scope="module")
def collection() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """What pytest collects, read once for the checks below."""
    return collected()


def test_every_sep_row_and_position_has_a_row():
    assert sorted(set(ROW_IDS) - set(table_rows())) == []


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_every_row_names_a_test_or_a_reason(row_id):
    line = " | ".join(table_rows()[row_id])
    # A test that pins it, or a reason: nothing a test could catch, not shown and why, or a position.
    assert (
        TEST_REFERENCE.search(line)
        or "**Not demonstrated**" in line
        or "**Nothing to test**" in line
        or re.search(r"\bP\d+ below\b", line)
    )


@pytest.mark.parametrize(("file_name", "test_name"), sorted(set(TEST_REFERENCE.findall(TABLE))))
def test_every_named_test_exists(file_name, test_name):
    assert (HERE / file_name).exists(), f"{file_name} does not exist"
    assert test_name in functions_defined_in(file_name), f"{file_name} has no {test_name}"


@pytest.mark.parametrize("path", sorted(set(OTHER_CHECK.findall(TABLE))))
def test_every_named_check_outside_pytest_exists(path):
    assert (HERE / path).exists()


def test_every_row_ran_on_the_targets_it_claims(collection):
    """A row's Targets cell is exactly where pytest collects the tests it names."""
    targets, _ = collection
    wrong = {}
    for row_id, cells in table_rows().items():
        named = TEST_REFERENCE.findall(cells[-3])
        claimed = set(filter(None, (target.strip() for target in cells[-2].split(","))))
        where = set().union(*(targets.get(f"{file}::{test}", set()) for file, test in named))
        if claimed != where:
            wrong[row_id] = f"claims {sorted(claimed)}, its tests ran on {sorted(where)}"
    assert wrong == {}


def test_every_row_names_the_tier_that_owns_it_and_a_test_of_that_tier(collection):
    """A row's Tier cell is one tier, and some test it names is of that tier (a kit row names a kit check); a row
    that names no test names no tier."""
    _, tiers = collection
    wrong = {}
    for row_id, cells in table_rows().items():
        named = TEST_REFERENCE.findall(cells[-3])
        of_its_tests = set().union(*(tiers.get(f"{file}::{test}", set()) for file, test in named))
        owner = cells[-1]
        if (owner or None) not in (of_its_tests or {None}):  # conftest.py's tier_of names the tiers
            wrong[row_id] = f"names tier {owner!r}, its tests are of {sorted(of_its_tests)}"
    assert wrong == {}
