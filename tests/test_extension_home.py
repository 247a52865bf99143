"""The extension's home (extension/): schema.ts type-checks, the JSON Schema checked in beside it is the one
its generator gives, and every JSON example of the specification and the SEP is valid against the definition
its fence names (```json KeyedCallToolRequest), so an example and the types cannot drift apart.

Node runs the generator and tsc from the versions extension/package-lock.json pins, installed as the other
Node folders are (tests/node_packages.py)."""

import json
import re
import shutil
import subprocess

import pytest
from jsonschema import Draft7Validator
from node_packages import EXTENSION, npm_installed

SCHEMA_FOLDER = EXTENSION / "schema" / "draft"
SCHEMA = json.loads((SCHEMA_FOLDER / "schema.json").read_text(encoding="utf-8"))
DOCUMENTS = [
    EXTENSION / "specification" / "draft" / "idempotency.mdx",
    EXTENSION / "seps" / "0000-request-idempotency.md",
]
JSON_EXAMPLE = re.compile(r"^```json(?P<definition>[^\n]*)\n(?P<body>.*?)^```", re.S | re.M)
KEY = "8e03978e-40d5-43e8-bc93-6894a57f9324"


def problems(definition: str, value) -> list[str]:
    """What in `value` the generated schema's `definition` refuses; empty when it conforms."""
    validator = Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": SCHEMA["definitions"]})
    return [error.message for error in validator.iter_errors(value)]


def npm(*script: str, folder=EXTENSION) -> subprocess.CompletedProcess:
    """`npm run --silent SCRIPT` in `folder`, its packages installed as the lockfile pins."""
    npm_installed(EXTENSION)
    return subprocess.run(["npm", "run", "--silent", *script], cwd=folder, capture_output=True, text=True, timeout=300)


def test_schema_ts_type_checks():
    checked = npm("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_checked_in_json_schema_is_the_one_schema_ts_generates():
    checked = npm("check:schema")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_type_changed_without_regenerating_fails_the_schema_check(tmp_path):
    """The comparison can fail: a copy of the home whose schema.ts gained a member, schema.json left as it was."""
    npm_installed(EXTENSION)
    copy = tmp_path / "extension"
    shutil.copytree(EXTENSION, copy, ignore=shutil.ignore_patterns("node_modules"), symlinks=True)
    (copy / "node_modules").symlink_to(EXTENSION / "node_modules")
    types = copy / "schema" / "draft" / "schema.ts"
    changed = types.read_text(encoding="utf-8").replace(
        "  leaseSeconds?: number;", "  leaseSeconds?: number;\n  extra?: string;"
    )
    assert changed != types.read_text(encoding="utf-8")
    types.write_text(changed, encoding="utf-8")

    checked = npm("check:schema", folder=copy)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "npm run generate" in checked.stderr


def examples(document) -> list[tuple[str, str]]:
    """Each ```json block of `document`: the definition its fence names, and its text."""
    text = document.read_text(encoding="utf-8")
    return [(match["definition"].strip(), match["body"]) for match in JSON_EXAMPLE.finditer(text)]


EXAMPLES = [(document.name, definition, body) for document in DOCUMENTS for definition, body in examples(document)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_each_document_has_json_examples(document):
    assert len(examples(document)) >= 2


@pytest.mark.parametrize(("document", "definition", "body"), EXAMPLES, ids=[f"{e[0]}-{e[1]}" for e in EXAMPLES])
def test_every_json_example_is_valid_against_the_definition_its_fence_names(document, definition, body):
    assert definition in SCHEMA["definitions"], (
        f"{document}: a ```json block must name a definition, got {definition!r}"
    )
    assert problems(definition, json.loads(body)) == []


# What the specification forbids, each shape the schema must refuse.
REFUSED = [
    ("IdempotencyKey", ""),
    ("IdempotencyKey", 7),
    ("IdempotencySettings", {"maxKeyLength": 0}),
    ("IdempotencySettings", {"retentionSeconds": 1.5}),
    ("IdempotencySettings", {"deadlineSeconds": "600"}),
    ("IdempotencyErrorData", {"type": "idempotency_key_conflict", "idempotencyKey": KEY, "retryable": True}),
    ("IdempotencyErrorData", {"type": "idempotency_key_in_progress", "retryable": True}),
    ("IdempotencyErrorData", {"type": "idempotency_store_full", "idempotencyKey": KEY, "retryable": False}),
    ("IdempotencyErrorData", {"type": "idempotency_key_expired", "idempotencyKey": KEY, "retryable": True}),
    (
        "IdempotencyError",
        {"code": -32603, "message": "m", "data": {"type": "invalid_idempotency_key", "retryable": False}},
    ),
    ("KeyedCallToolRequest", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "_meta": {}}}),
    ("AcknowledgedCallToolResponse", {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "_meta": {}}}),
]
TAKEN = [
    ("IdempotencyKey", "\U0001f600"),
    ("IdempotencySettings", {}),
    ("IdempotencyServerCapabilities", {"tools": {}, "extensions": {"io.modelcontextprotocol/idempotency": {}}}),
    ("IdempotencyErrorData", {"type": "invalid_idempotency_key", "retryable": False}),
    ("IdempotencyErrorData", {"type": "idempotency_store_unavailable", "idempotencyKey": KEY, "retryable": True}),
]


@pytest.mark.parametrize(("definition", "value"), REFUSED)
def test_the_schema_refuses_what_the_specification_forbids(definition, value):
    assert problems(definition, value) != []


@pytest.mark.parametrize(("definition", "value"), TAKEN)
def test_the_schema_takes_what_the_specification_allows(definition, value):
    assert problems(definition, value) == []


def test_every_type_the_seps_schema_block_declares_is_one_of_schema_ts():
    sep = DOCUMENTS[1].read_text(encoding="utf-8")
    [block] = re.findall(r"^```typescript\n(.*?)^```", sep, re.S | re.M)
    declared = set(re.findall(r"export (?:type|interface) (\w+)", block))
    assert declared and declared <= set(SCHEMA["definitions"]), declared - set(SCHEMA["definitions"])
