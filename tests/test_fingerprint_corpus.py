"""P3 across languages: the corpus the TypeScript package's tests read holds the digests rules.fingerprint gives.

Each case is a tool's name and its arguments as JSON text; its digest is asserted here for the Python library and
in typescript/packages/mcp-idempotency/test/fingerprint.test.ts for the TypeScript one, so a call first sent to
one and retried on the other, over one store, is the same request. A case added to the corpus needs its digest
from this side: `digest` is what the assertion below prints when it differs.
"""

import json
from pathlib import Path

import pytest

from mcp_idempotency.rules import fingerprint

CORPUS = Path(__file__).resolve().parent.parent / "typescript/packages/mcp-idempotency/test/fingerprint-corpus.json"
CASES = json.loads(CORPUS.read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", CASES, ids=[case["case"] for case in CASES])
def test_fingerprint_corpus_digests_as_committed(case):
    assert fingerprint(case["tool"], json.loads(case["arguments"])).hex() == case["digest"]


def test_fingerprint_corpus_holds_the_numbers_at_the_edges():
    """The cases the two languages could part on are there: equal spellings of one number, and unequal numbers."""
    digests = {case["case"]: case["digest"] for case in CASES}
    assert digests["one"] == digests["one as a float"] == digests["one with an exponent"]
    assert digests["zero"] == digests["minus zero"] == digests["minus zero as a float"]
    assert digests["member order a-b"] == digests["member order b-a"]
    assert digests["unicode text"] == digests["unicode escaped in the request"]
    assert digests["2**53+1, beyond a double"] != digests["2**53"] == digests["2**53+1 written as a float"]
    assert len({case["arguments"] for case in CASES}) == len(CASES)
