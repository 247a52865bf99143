"""The SEP document and its traceability file (conformance/sep-3182.yaml) say the same thing: every
sentence of the document with a MUST or a SHOULD is quoted in the file, every text the file quotes is a
sentence of the document, and every entry names a check of the kit or a reason it has none."""

import re

import pytest
from kit_targets import kit
from wire import ROOT

SEP = ROOT / "docs" / "seps" / "0000-request-idempotency.md"
REQUIREMENTS = kit.load_requirements(ROOT / "conformance" / "sep-3182.yaml")["requirements"]
NORMATIVE = re.compile(r"\b(MUST|SHOULD)\b")
FENCED = re.compile(r"^```.*?^```\n?", re.S | re.M)
LIST_ITEM = re.compile(r"^(?:[-*]|\d+\.) ")
# A sentence ends at . ? or ! before a space and what can open the next: a capital, code, a quote, a bracket.
SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`\"(\[_])")


def blocks(markdown: str) -> list[str]:
    """The document's paragraphs, list items and table rows, each on one line; code and headings left out."""
    found, paragraph = [], []
    for line in FENCED.sub("", markdown).splitlines():
        item = LIST_ITEM.match(line)
        if line.strip() and not line.startswith(("#", "|")) and not item:
            paragraph.append(line.strip())
            continue
        if paragraph:
            found.append(" ".join(paragraph))
        paragraph = [line[item.end() :]] if item else []
        if line.startswith("|"):
            found.append(line)
    if paragraph:
        found.append(" ".join(paragraph))
    return found


def sentences(markdown: str) -> list[str]:
    """Every sentence as it reads, bold marks removed (the file quotes them so)."""
    return [
        sentence.strip()
        for block in blocks(markdown)
        for sentence in SENTENCE_END.split(block.replace("**", ""))
        if sentence.strip()
    ]


DOCUMENT = sentences(SEP.read_text(encoding="utf-8"))
QUOTED = {requirement["text"] for requirement in REQUIREMENTS}


@pytest.mark.parametrize("sentence", [s for s in DOCUMENT if NORMATIVE.search(s)])
def test_every_must_and_should_of_the_sep_is_quoted_in_the_trace(sentence):
    assert sentence in QUOTED


@pytest.mark.parametrize("text", sorted(QUOTED))
def test_every_text_the_trace_quotes_is_a_sentence_of_the_sep(text):
    assert text in DOCUMENT


def test_a_sentence_changed_in_the_sep_is_caught():
    """The drift test can fail: one word changed in a traced sentence leaves it quoted nowhere."""
    original = SEP.read_text(encoding="utf-8")
    changed = original.replace("be atomic:", "be atomic and durable:")
    assert changed != original
    assert any(NORMATIVE.search(s) and s not in QUOTED for s in sentences(changed))


def test_sentences_split_at_their_ends_and_join_across_lines():
    text = "# Title\n\nA server **MUST** do\nthis. It `x` then.\n\n- An item SHOULD hold.\n\n```\nMUST not read\n```\n"
    assert sentences(text) == ["A server MUST do this.", "It `x` then.", "An item SHOULD hold."]


def test_the_sep_is_at_most_3000_words_outside_code_blocks():
    assert len(FENCED.sub("", SEP.read_text(encoding="utf-8")).split()) <= 3000


def test_the_sep_names_no_test_and_none_of_this_projects_row_or_position_ids():
    # Ids such as S3, K2, P18' and P5' are the project's summary of the SEP, not the SEP's own;
    # a Working Group reader cannot follow them, nor a test's name, without a clone.
    text = SEP.read_text(encoding="utf-8")
    assert not re.findall(r"\btest_\w+|\b(?:[WCSERKLAP]\d{1,2}[a-z]?'*)(?![\w-])", FENCED.sub("", text))
