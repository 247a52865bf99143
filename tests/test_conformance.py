"""CONFORMANCE.md stays true: every row is there, and every test it names exists."""

import ast
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TABLE = (HERE / "CONFORMANCE.md").read_text(encoding="utf-8")

# The rows of the SEP summary (section A) and the positions (section B).
ROW_IDS = (
    [f"W{n}" for n in range(1, 9)] + [f"C{n}" for n in range(1, 7)]
    + ["S0", "S1", "S1a", "S2", "S2a", "S2b", "S3", "S3a", "S3b", "S4", "S5", "S6"]
    + [f"E{n}" for n in range(1, 9)] + [f"R{n}" for n in range(1, 8)] + [f"K{n}" for n in range(1, 5)]
    + [f"L{n}" for n in range(1, 8)] + ["A1"] + [f"P{n}" for n in range(1, 14)]
)
TEST_REFERENCE = re.compile(r"`(test_\w+\.py)::(test_\w+)`")
OTHER_CHECK = re.compile(r"`(interop/[\w.]+)`")


def table_rows() -> dict[str, str]:
    """Row id -> the rest of its table line."""
    rows = {}
    for line in TABLE.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in ROW_IDS:
            rows[cells[0]] = line
    return rows


def functions_defined_in(file_name: str) -> set[str]:
    """The names of the test functions defined in one test file."""
    tree = ast.parse((HERE / file_name).read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def test_every_sep_row_and_position_has_a_row():
    assert sorted(set(ROW_IDS) - set(table_rows())) == []


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_every_row_names_a_test_or_a_reason(row_id):
    line = table_rows()[row_id]
    assert TEST_REFERENCE.search(line) or "**Not demonstrated**" in line or re.search(r"\bP\d+ below\b", line)


@pytest.mark.parametrize(("file_name", "test_name"), sorted(set(TEST_REFERENCE.findall(TABLE))))
def test_every_named_test_exists(file_name, test_name):
    assert (HERE / file_name).exists(), f"{file_name} does not exist"
    assert test_name in functions_defined_in(file_name), f"{file_name} has no {test_name}"


@pytest.mark.parametrize("path", sorted(set(OTHER_CHECK.findall(TABLE))))
def test_every_named_check_outside_pytest_exists(path):
    assert (HERE / path).exists()
