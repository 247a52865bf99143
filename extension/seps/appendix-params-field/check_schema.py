"""Check sep-3182.schema.json (this folder) against its examples, and its examples against it.

Run from the repository root with any Python that has `jsonschema` (both test environments do):

    .venv/bin/python extension/seps/appendix-params-field/check_schema.py [SPEC_CHECKOUT]

It validates the two example messages in examples/, then values each definition must
refuse (a conflict marked retryable, an echoed invalid key, a key of 256 characters, ...) and values
it must take. Given the folder where schema-ts.patch was applied, it also validates the
three example files the patch adds to the spec repository. Exit status 0 only if every case held.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

HERE = Path(__file__).resolve().parent
SCHEMA = json.loads((HERE / "sep-3182.schema.json").read_text())

MUST_TAKE: list[tuple[str, Any]] = [
    ("IdempotencyErrorData", {"type": "invalid_idempotency_key", "retryable": False}),
    ("IdempotencyErrorData", {"type": "idempotency_store_unavailable", "idempotencyKey": "k", "retryable": True}),
    ("IdempotencyErrorData", {"type": "idempotency_key_in_progress", "idempotencyKey": "k", "retryable": True}),
    ("IdempotencyKey", "\U0001f600" * 255),  # characters are code points, not UTF-16 units
    ("ServerCapabilitiesTools", {"listChanged": True, "idempotency": {}}),
    ("ServerCapabilitiesTools", {"idempotency": {"maxKeyLength": 255, "retentionSeconds": 86400}}),
]
MUST_REFUSE: list[tuple[str, Any]] = [
    ("IdempotencyErrorData", {"type": "idempotency_key_conflict", "idempotencyKey": "k", "retryable": True}),
    ("IdempotencyErrorData", {"type": "invalid_idempotency_key", "idempotencyKey": "k", "retryable": False}),
    ("IdempotencyErrorData", {"type": "idempotency_store_full", "idempotencyKey": "k", "retryable": False}),
    ("IdempotencyErrorData", {"type": "idempotency_key_in_progress", "retryable": True}),
    ("IdempotencyErrorData", {"type": "idempotency_key_expired", "idempotencyKey": "k", "retryable": True}),
    ("IdempotencyErrorData", {"type": "idempotency_key_conflict", "idempotencyKey": "k"}),
    ("IdempotencyKey", ""),
    ("IdempotencyKey", "x" * 256),
    ("IdempotencyKey", 7),
    ("ToolsIdempotencyCapability", {"maxKeyLength": 300}),
    ("ToolsIdempotencyCapability", {"retentionSeconds": 1.5}),
    (
        "IdempotencyError",
        {
            "code": -32020,
            "message": "m",  # the code is -32602, not an allocated one
            "data": {"type": "invalid_idempotency_key", "retryable": False},
        },
    ),
]
EXAMPLES = [
    ("CallToolRequest", HERE / "examples" / "keyed-tools-call-request.json"),
    ("IdempotencyErrorResponse", HERE / "examples" / "conflict-rejection.json"),
]
SPEC_EXAMPLES = [  # the files schema-ts.patch adds under schema/draft/examples/
    ("CallToolRequest", "CallToolRequest/call-tool-request-with-idempotency-key.json", None),
    ("IdempotencyError", "IdempotencyError/idempotency-key-conflict.json", None),
    ("ServerCapabilitiesTools", "ServerCapabilities/tools-idempotency.json", "tools"),
]


def errors(definition: str, value: Any) -> list[str]:
    """Every way `value` fails the schema's `definition`."""
    validator = Draft202012Validator(
        {"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{definition}"}
    )
    return [error.message for error in validator.iter_errors(value)]


def main(argv: list[str]) -> int:
    Draft202012Validator.check_schema(SCHEMA)
    failures = 0
    cases = [(name, json.loads(path.read_text()), f"example {path.name}") for name, path in EXAMPLES]
    if argv:
        root = Path(argv[0]) / "schema" / "draft" / "examples"
        for name, relative, member in SPEC_EXAMPLES:
            value = json.loads((root / relative).read_text())
            cases.append((name, value[member] if member else value, f"spec example {relative}"))
    cases += [(name, value, "must take") for name, value in MUST_TAKE]
    for name, value, label in cases:
        found = errors(name, value)
        print(f"{'ok  ' if not found else 'FAIL'} {label}: {name} {str(value)[:70]}{'' if not found else f' {found}'}")
        failures += bool(found)
    for name, value in MUST_REFUSE:
        refused = bool(errors(name, value))
        print(f"{'ok  ' if refused else 'FAIL'} must refuse: {name} {str(value)[:70]}")
        failures += not refused
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
