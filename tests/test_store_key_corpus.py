"""Keys across languages: the corpus the TypeScript package's tests read spells each key as this library's store does.

A Python and a TypeScript instance over one store find each other's records only if both turn a principal and a key
into the same text; test/store-keys.test.ts asserts the TypeScript side of the same corpus.
"""

import json
from pathlib import Path

import pytest

from mcp_idempotency.rules import principal_name, scoped_key

CORPUS = Path(__file__).resolve().parent.parent / "typescript/packages/mcp-idempotency/test/store-key-corpus.json"
CASES = json.loads(CORPUS.read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", CASES, ids=[case["case"] for case in CASES])
def test_store_key_corpus_spells_as_committed(case):
    principal = tuple(case["principal"])
    assert (principal_name(principal), scoped_key(principal, case["key"])) == (case["principalName"], case["scopedKey"])


def test_store_key_corpus_holds_what_the_languages_escape_differently():
    """Each kind of character JSON.stringify and json.dumps write apart is in some key."""
    keys = "".join(case["key"] for case in CASES)
    for character in ('"', "\\", "\x7f", "\n", "\x01", "é", "\U0001f600", "\ud800"):
        assert character in keys
