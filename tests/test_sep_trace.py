"""The extension's specification, its SEP and its traceability file (conformance/sep-3182.yaml) say the
same thing: every sentence of the SEP with a MUST, a SHOULD or a MAY is a sentence of the specification,
every sentence of the specification with a MUST or a SHOULD is quoted in the file, every text the file
quotes is a sentence of the specification, and every entry names a check of the kit or a reason it has none."""

import re

import pytest
from kit_targets import kit
from wire import ROOT

HOME = ROOT / "extension"
SPECIFICATION = HOME / "specification" / "draft" / "idempotency.mdx"
SEP = HOME / "seps" / "0000-request-idempotency.md"
REQUIREMENTS = kit.load_requirements(ROOT / "conformance" / "sep-3182.yaml")["requirements"]
NORMATIVE = re.compile(r"\b(MUST|SHOULD)\b")
KEYWORD = re.compile(r"\b(MUST|SHOULD|MAY|REQUIRED|SHALL|RECOMMENDED|OPTIONAL)\b")
FENCED = re.compile(r"^```.*?^```\n?", re.S | re.M)
FRONT_MATTER = re.compile(r"\A---\n.*?^---\n", re.S | re.M)
LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.) ")
# A sentence ends at . ? or ! before a space and what can open the next: a capital, code, a quote, a bracket.
SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`\"(\[_])")
BCP_14 = 'The key words "MUST"'  # the conventions sentence names the keywords and states no rule


def blocks(markdown: str) -> list[str]:
    """The paragraphs, list items and table rows, each on one line; code, front matter and headings left out."""
    found, paragraph = [], []
    for line in FENCED.sub("", FRONT_MATTER.sub("", markdown)).splitlines():
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


def section(markdown: str, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of that level."""
    match = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, heading
    return match.group(1)


SEP_TEXT = SEP.read_text(encoding="utf-8")
SPECIFIED = sentences(SPECIFICATION.read_text(encoding="utf-8"))
QUOTED = {requirement["text"] for requirement in REQUIREMENTS}


@pytest.mark.parametrize("sentence", [s for s in sentences(SEP_TEXT) if KEYWORD.search(s)])
def test_every_normative_sentence_of_the_sep_is_a_sentence_of_the_specification(sentence):
    assert sentence in SPECIFIED


def test_the_seps_specification_section_states_rules_with_their_keywords():
    """The SEP's own Specification section carries the rules (not only a link), so the test above bites there."""
    ruled = [s for s in sentences(section(SEP_TEXT, "Specification")) if KEYWORD.search(s)]
    assert len(ruled) >= 10, ruled


@pytest.mark.parametrize("sentence", [s for s in SPECIFIED if NORMATIVE.search(s) and not s.startswith(BCP_14)])
def test_every_must_and_should_of_the_specification_is_quoted_in_the_trace(sentence):
    assert sentence in QUOTED


@pytest.mark.parametrize("text", sorted(QUOTED))
def test_every_text_the_trace_quotes_is_a_sentence_of_the_specification(text):
    assert text in SPECIFIED


def test_a_sentence_changed_in_the_sep_is_caught():
    """The hold on the SEP can fail: a word changed in a normative sentence makes it none of the specification's."""
    changed = SEP_TEXT.replace("The claim MUST be atomic:", "The claim MUST be atomic and durable:")
    assert changed != SEP_TEXT
    assert any(KEYWORD.search(s) and s not in SPECIFIED for s in sentences(changed))


def test_sentences_split_at_their_ends_and_join_across_lines():
    text = (
        "---\ntitle: T. It\n---\n# Title\n\nA server **MUST** do\nthis. It `x` then.\n\n"
        "- An item SHOULD hold.\n\n```\nMUST not read\n```\n"
    )
    assert sentences(text) == ["A server MUST do this.", "It `x` then.", "An item SHOULD hold."]


def test_the_sep_is_at_most_3000_words_outside_code_blocks():
    assert len(FENCED.sub("", SEP_TEXT).split()) <= 3000


@pytest.mark.parametrize("document", [SEP, SPECIFICATION], ids=lambda path: path.name)
def test_the_documents_name_no_test_and_none_of_this_projects_row_or_position_ids(document):
    # Ids such as S3, K2, P18' and P5' are the project's summary of the SEP, not the SEP's own;
    # a Working Group reader cannot follow them, nor a test's name, without a clone.
    text = FENCED.sub("", document.read_text(encoding="utf-8"))
    assert not re.findall(r"\btest_\w+|\b(?:[WCSERKLAP]\d{1,2}[a-z]?'*)(?![\w-])", text)
