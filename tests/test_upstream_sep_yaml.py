"""upstream/conformance/sep_yaml.py: the official suite's sep-3182.yaml, written from the SEP's sentences.

The script runs as the lead runs it, a process reading a markdown file; its yaml is read
back here with a few lines of parsing (the suite's layout is fixed: `- check:` or
`- text:` items of two keys).
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "upstream" / "conformance" / "sep_yaml.py"
SCENARIO_DIR = ROOT / "upstream" / "conformance" / "src" / "scenarios" / "server"
# The scenario's modules: idempotency.ts and the idempotency-*.ts it imports, not its vitest file.
SCENARIO = sorted(path for path in SCENARIO_DIR.glob("idempotency*.ts") if not path.name.endswith(".test.ts"))
SPECIFICATION = ROOT / "extension" / "specification" / "draft" / "idempotency.mdx"  # the SEP only summarises it


def generated(document: Path, *options: str) -> str:
    """The yaml the script writes for `document`."""
    command = [sys.executable, str(SCRIPT), str(document), *options]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return done.stdout


def unquoted(value: str) -> str:
    """A scalar's text: single-quoted with '' for a quote, double-quoted, or bare."""
    if value.startswith("'"):
        return value[1:-1].replace("''", "'")
    return value[1:-1] if value.startswith('"') else value


def rows(yaml: str) -> list[dict[str, str]]:
    """The requirement rows, each as its keys and unquoted values."""
    found: list[dict[str, str]] = []
    for line in yaml.splitlines():
        item = re.match(r"\s+(- )?(\w+): (.*)$", line)
        if item is None:
            continue
        if item.group(1):
            found.append({})
        value = item.group(3)
        found[-1][item.group(2)] = unquoted(value)
    return found


def written(tmp_path: Path, specification: str) -> list[dict[str, str]]:
    """The rows for a document whose Specification section is `specification`."""
    document = tmp_path / "sep.md"
    document.write_text(f"# A SEP\n\n## Motivation\n\nClients MUST retry.\n\n## Specification\n\n{specification}\n")
    return rows(generated(document))


def test_each_normative_sentence_of_the_specification_is_one_row_and_a_may_sentence_none(tmp_path):
    found = written(
        tmp_path, "A server **MUST** declare it. A server **MAY** state the window. Servers **SHOULD** log it."
    )
    assert [row["text"] for row in found] == ["A server MUST declare it.", "Servers SHOULD log it."]
    assert [row.get("check") for row in found] == ["sep-3182-capability-advertised", None]


def test_a_sentence_that_defines_what_a_check_tests_is_a_row_though_it_states_no_must(tmp_path):
    found = written(tmp_path, "A key is a string. An absent or `null` key is no key: the call runs as before.")
    assert found == [
        {
            "check": "sep-3182-no-key-runs-every-time",
            "text": "An absent or `null` key is no key: the call runs as before.",
        }
    ]


def test_a_citation_is_dropped_and_brackets_inside_inline_code_are_kept(tmp_path):
    found = written(
        tmp_path,
        'A server **MUST** read `_meta["k"]` as a repeat [`check-a`; [a file](x.py) and `t.py::test`] '
        "and answer with the recorded outcome.",
    )
    assert found == [
        {
            "check": "sep-3182-repeat-replays-outcome",
            "text": 'A server MUST read `_meta["k"]` as a repeat and answer with the recorded outcome.',
        }
    ]


def test_a_compound_requirement_is_two_rows_and_a_pronoun_keeps_the_rule_before_it(tmp_path):
    found = written(
        tmp_path, "The server **MUST** reject a conflict, and **MUST NOT** run the tool. It **MUST NOT** wait."
    )
    assert [(row["text"], row["check"]) for row in found] == [
        ("The server MUST reject a conflict", "sep-3182-conflict-rejected"),
        ("It MUST NOT run the tool.", "sep-3182-conflict-rejected"),
        ("It MUST NOT wait.", "sep-3182-conflict-rejected"),
    ]


def test_a_client_duty_is_excluded_and_a_server_rule_no_check_tests_is_left_to_a_human(tmp_path):
    found = written(
        tmp_path,
        "A client **SHOULD** mint a fresh conflict key. The key is the runtime's: a client **MUST NOT** show it. "
        "A server **MUST** ignore the key on other methods.",
    )
    assert [row.get("check") for row in found] == [None, None, None]
    assert [row["excluded"].split(":")[0] for row in found] == ["A client's duty", "A client's duty", "TODO"]


def test_the_check_rows_come_first_then_a_blank_line_then_the_excluded_ones(tmp_path):
    document = tmp_path / "sep.md"
    document.write_text("## Specification\n\nA client **MUST** wait. A server **MUST** declare it.\n")
    assert generated(document).splitlines()[2:] == [
        "requirements:",
        "  - check: sep-3182-capability-advertised",
        "    text: 'A server MUST declare it.'",
        "",
        "  - text: 'A client MUST wait.'",
        '    excluded: "A client\'s duty: a server scenario observes only what the server does."',
    ]


def test_the_yaml_of_the_specification_names_exactly_the_checks_the_scenario_emits():
    source = "\n".join(path.read_text(encoding="utf-8") for path in SCENARIO)
    emitted = set(re.findall(r"'(sep-3182-[a-z-]+)'", source))
    named = {row["check"] for row in rows(generated(SPECIFICATION, "--section", "")) if "check" in row}
    assert len(emitted) == 11 and named == emitted, (sorted(named - emitted), sorted(emitted - named))


def test_the_committed_yaml_is_what_the_script_writes_from_the_specification():
    committed = ROOT / "upstream" / "conformance" / "src" / "seps" / "sep-3182.yaml"
    assert generated(SPECIFICATION, "--section", "") == committed.read_text(encoding="utf-8")
