"""What a reader can count on in every tracked file: each fits in 500 lines, the README is a front page
of at most 150, and no Python file edits sys.path.

The kit is one file an outsider downloads (conformance/kit.py), and npm writes its lockfiles: both are
left out of the length rule, and nothing else is. The sys.path rule reads every line, strings included,
since a script a test writes out is code too.
"""

import re
import subprocess

from wire import ROOT

MOST_LINES = 500
FRONT_PAGE_LINES = 150  # README.md: what it fixes, the two commands, one scenario, a link per reader
LONG_BY_DESIGN = {"conformance/kit.py"}
SYS_PATH_EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove)\b|\[[^\]]*\]\s*=|\+?=)")


def tracked_files() -> list[str]:
    """Every file git tracks in this repository."""
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def written_by_hand(path: str) -> bool:
    """Is this a file a person writes (not a lockfile, not the kit), so that the length rule holds for it?"""
    return path not in LONG_BY_DESIGN and not path.endswith("package-lock.json")


def test_no_tracked_file_is_over_500_lines():
    lines = {path: len((ROOT / path).read_bytes().splitlines()) for path in tracked_files() if written_by_hand(path)}
    too_long = {path: count for path, count in lines.items() if count > MOST_LINES}
    assert lines and too_long == {}, too_long


def test_the_readme_is_a_front_page_of_at_most_150_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert 0 < lines <= FRONT_PAGE_LINES, lines


def test_no_python_file_edits_sys_path():
    sources = [path for path in tracked_files() if path.endswith(".py")]
    edits = [
        f"{path}:{number}"
        for path in sources
        for number, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), 1)
        if SYS_PATH_EDIT.search(line)
    ]
    assert sources and edits == [], edits


def test_the_sys_path_rule_sees_each_kind_of_edit():
    """The pattern itself, so that a weakened one fails here rather than passing every file."""
    path = "sys" + ".path"  # spelled in two parts, so that this file is no edit itself
    for edit in [".insert(0, x)", ".append(x)", "[:0] = [x]", " += [x]", " = []"]:
        assert SYS_PATH_EDIT.search(path + edit), edit
    for no_edit in ["print(", "len(", "x = "]:
        assert not SYS_PATH_EDIT.search(no_edit + path + ")"), no_edit
