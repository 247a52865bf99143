"""Write the conformance suite's sep-NNNN.yaml from a SEP document's MUST, MUST NOT and SHOULD sentences.

Each normative sentence of the document's Specification section (or of the whole document, for
an extension's specification, with --section ''; the SEP only summarises it) becomes one requirement
row: a `check:` row when a check of the idempotency scenario tests it, else an
`excluded:` row that says why the scenario cannot observe it, or a `TODO:` reason for a
human to settle (a check to write, or an exclusion to confirm). MAY sentences get no row,
as the suite's own guide asks. Standard library only.

    python3 upstream/conformance/sep_yaml.py extension/specification/draft/idempotency.mdx --section '' \
        > upstream/conformance/src/seps/sep-3182.yaml
"""

import argparse
import re
import sys
from pathlib import Path

# The spec pull request that will propose the extension (SEP numbers are PR numbers): a placeholder until it is open.
SPEC_URL = "https://github.com/modelcontextprotocol/modelcontextprotocol/pull/XXXX"
NORMATIVE = re.compile(r"\b(MUST|SHOULD|SHALL|REQUIRED)\b")

# The scenario's checks, and what a sentence says when one of them tests it. Tried in
# order, after the exclusions: the first pattern a sentence matches decides its row.
CHECKS = (
    (
        "sep-3182-in-progress-rejected",
        r"in[ _]progress|still running|second execution|make the repeat wait|first execution is alive",
    ),
    (
        "sep-3182-conflict-rejected",
        r"conflict|not equivalent|carry `data\.type` and `data\.retryable`|carry the key in `data\.idempotencyKey`"
        r"|record its own rejections",
    ),
    ("sep-3182-invalid-key-rejected", r"(reject|refuse) any other value|echo (the|an invalid) value"),
    ("sep-3182-key-elsewhere-ignored", r"named like the key"),
    ("sep-3182-integers-compared-exactly", r"integers MUST compare exactly|cannot hold an integer"),
    ("sep-3182-read-only-tool-deduplicated", r"whatever its annotations"),
    ("sep-3182-failed-outcome-recorded", r"record the outcome the call produced"),
    ("sep-3182-result-acknowledged", r"identifier that names the key|acknowledgement is recorded with the result"),
)
LATER_CHECKS = (
    (
        "sep-3182-capability-advertised",
        r"\bdeclare|\badvertise|setting MUST be a positive integer|SHOULD state `retentionSeconds`",
    ),
    (
        "sep-3182-repeat-replays-outcome",
        r"answer with the recorded outcome|previously produced|recogni[sz]es as a repeat|outcome as it was recorded",
    ),
)

# Sentences that state no MUST or SHOULD but define what a check tests: a row each, so that every check the
# scenario emits is traced to the SEP's words.
DEFINITIONS = (("sep-3182-no-key-runs-every-time", r"absent or `null` key is no key"),)

# What a server scenario cannot observe, and why; tried before the checks, first match wins.
EXCLUSIONS = (
    (r"key words", "The document's conventions (RFC 2119), not a requirement."),
    (r"-32042|input-required", "Needs a tool that asks for input or a URL first; the fixtures do not."),
    (r"task", "Tasks (SEP-2663): a task-augmented call is not part of this scenario."),
    (
        r"\blease\b|two executions|both executions|\brenew|shuts down|replace it|transaction|downstream",
        "Needs a run that outlives its claim, on several instances.",
    ),
    (r"loopback|gateway|protect its records", "Deployment advice: not observable from one client."),
    (
        r"principal|authori[sz]|someone else|token",
        "A server scenario connects with no credential: it cannot speak as two principals, nor with a narrowed token.",
    ),
    (r"instances|restart|atomic", "Needs several instances of the server sharing its records, or a restart."),
    (r"bound the number|bound (or the share )?is reached", "Needs a server started with a small bound on its records."),
    (r"bounded window|keep a completed record", "Needs a server started with a short window."),
    (r"cancel", "Needs a call cancelled mid-run; the scenario does not cancel."),
    (r"revision", "Needs a server that speaks two protocol revisions."),
    (r"retry declares|declares less", "Needs a retry that declares fewer client capabilities than its original."),
)
CLIENT_DUTY = "A client's duty: a server scenario observes only what the server does."
TODO = "TODO: no check of the scenario tests this; write one, or confirm an exclusion."


def section(markdown: str, title: str) -> str:
    """The text under the level-two heading `title`, up to the next level-two heading."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    if match is None:
        raise SystemExit(f"no '## {title}' section")
    return match.group(1)


def prose(text: str) -> str:
    """The section's prose: no code blocks, tables or headings, links as their text, citations dropped."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("|", "#")))
    spans: list[str] = []  # inline code, held aside so its brackets are not taken for citations

    def hold(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    text = re.sub(r"`[^`]*`", hold, text)
    text = re.sub(r"\[([^\[\]]*)\]\([^)]*\)", r"\1", text)
    while re.search(r"\s*\[[^\[\]]*\]", text):  # bracketed citations of the evidence, innermost first
        text = re.sub(r"\s*\[[^\[\]]*\]", "", text)
    text = re.sub(r"\x00(\d+)\x00", lambda match: spans[int(match.group(1))], text)
    return text.replace("**", "")


def sentences(text: str) -> list[str]:
    """The normative or defining sentences of each paragraph or bullet, a compound's second requirement a sentence
    of its own."""
    found = []
    for block in re.split(r"\n\s*\n|\n\s*[-*] |\n\s*\d+\. ", text):
        flat = " ".join(block.split()).lstrip("-* ")
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", flat):
            # "MUST x, and SHOULD y" is two requirements of one subject.
            first, *rest = re.split(r",? and (?=(?:MUST|SHOULD|SHALL)\b)", sentence)
            found += [first] + [f"It {clause}" for clause in rest]
    return [sentence.strip() for sentence in found if NORMATIVE.search(sentence) or first_match(DEFINITIONS, sentence)]


def subject(sentence: str, previous: str | None) -> str | None:
    """Who the sentence binds: a client (also after a colon or semicolon), a server, or (It, They) whoever the one
    before it bound."""
    if re.match(r"(A|An|The|Each) client|Clients", sentence) or re.search(r"\ba client (MUST|SHOULD)", sentence):
        return "client"
    if re.match(r"(A|An|The|Each) server|Servers", sentence):
        return "server"
    return previous if re.match(r"(It|They|This)\b", sentence) else None


def first_match(rules: tuple, sentence: str) -> str | None:
    """The check of the first rule whose pattern the sentence matches."""
    return next((check for check, pattern in rules if re.search(pattern, sentence, re.I)), None)


def requirements(text: str) -> list[dict[str, str]]:
    """One row per normative sentence: its check, or why it has none."""
    rows: list[dict[str, str]] = []
    who: str | None = None
    previous: dict[str, str] = {}
    for sentence in sentences(text):
        who = subject(sentence, who)
        row = {"text": sentence}
        excluded = next((why for pattern, why in EXCLUSIONS if re.search(pattern, sentence, re.I)), None)
        check = first_match(CHECKS + LATER_CHECKS + DEFINITIONS, sentence)
        if who == "client":
            row["excluded"] = CLIENT_DUTY
        elif excluded:
            row["excluded"] = excluded
        elif check:
            row["check"] = check
        elif sentence.startswith("It ") and previous:  # a second requirement of the rule just read
            row.update({key: value for key, value in previous.items() if key != "text"})
        else:
            row["excluded"] = TODO
        rows.append(row)
        previous = row
    return rows


def quoted(text: str) -> str:
    """A YAML quoted scalar, as the suite's prettier writes it: single quotes, double where that saves escapes."""
    if "'" in text and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return "'" + text.replace("'", "''") + "'"


def render(sep: int, spec_url: str, rows: list[dict[str, str]]) -> str:
    """The suite's layout: check rows first, a blank line, then the excluded ones."""
    lines = [f"sep: {sep}", f"spec_url: {spec_url}", "requirements:"]
    checked = [row for row in rows if "check" in row]
    excluded = [row for row in rows if "check" not in row]
    for row in checked:
        lines += [f"  - check: {row['check']}", f"    text: {quoted(row['text'])}"]
    if checked and excluded:
        lines.append("")
    for row in excluded:
        lines += [f"  - text: {quoted(row['text'])}", f"    excluded: {quoted(row['excluded'])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Read the SEP document named on the command line; write the yaml on stdout."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("document", type=Path, help="the SEP, e.g. extension/seps/0000-request-idempotency.md")
    parser.add_argument(
        "--section", default="Specification", help="the level-two heading read, '' for all (default: %(default)s)"
    )
    parser.add_argument("--sep", type=int, default=3182, help="the SEP's number (default: %(default)s)")
    parser.add_argument("--spec-url", default=SPEC_URL, help="the yaml's spec_url (default: the SEP's pull request)")
    settings = parser.parse_args(argv)
    document = settings.document.read_text(encoding="utf-8")
    text = prose(section(document, settings.section) if settings.section else document)
    sys.stdout.write(render(settings.sep, settings.spec_url, requirements(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
