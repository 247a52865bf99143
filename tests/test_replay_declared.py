"""P30: a replay fits what its retry declares. A result may take its shape from the client capabilities its
request declared (2026-07-28 puts them in the request's own _meta): a task handle only for a client that
declared Tasks (test_tasks.py), a UI resource only for one that declared the MCP Apps extension. The
fingerprint ignores _meta (E1), so a retry that declares less would be handed a result it cannot take:
the layer refuses it with SEP-2663's -32021, naming what to declare; nothing runs, and the record stays
for a retry that declares it."""

import pytest
from wire import new_key

# The 2.x layer's rules, which the transport adds nothing to: the quick set plays them over HTTP, the slow set on stdio.
pytestmark = [pytest.mark.targets("2x-stdio", "2x-http"), pytest.mark.quick_targets("2x-http")]

CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
UI = "io.modelcontextprotocol/ui"
DECLARES_UI = {CAPABILITIES: {"extensions": {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}}}
DECLARES_ELICITATION = {CAPABILITIES: {"elicitation": {"form": {}}}}


def charge(wire, key: str, meta: dict | None) -> dict:
    """A keyed charge of 100, declaring what `meta` declares."""
    return wire.call("charge_guarded", {"amount": 100}, key, **({"_meta": meta} if meta else {}))


@pytest.mark.parametrize(
    ("declared", "required"),
    [
        pytest.param(DECLARES_UI, {"extensions": {UI: DECLARES_UI[CAPABILITIES]["extensions"][UI]}}, id="an-extension"),
        pytest.param(DECLARES_ELICITATION, {"elicitation": {"form": {}}}, id="a-capability"),
    ],
)
def test_a_retry_that_declares_less_than_the_original_gets_32021_naming_it_and_the_record_stays(
    spawn, declared, required
):
    wire = spawn()
    key = new_key()
    original = charge(wire, key, declared)["result"]
    refused = charge(wire, key, None)["error"]
    assert refused == {
        "code": -32021,
        "message": "Missing required client capability",
        "data": {"requiredCapabilities": required},
    }
    assert charge(wire, key, declared)["result"] == original  # declaring it again: the replay
    assert wire.ledger() == {"balance": 100, "charges": 1}


def test_a_retry_that_declares_more_than_the_original_gets_the_replay(spawn):
    wire = spawn()
    key = new_key()
    original = charge(wire, key, None)["result"]
    assert charge(wire, key, DECLARES_UI)["result"] == original
    assert wire.ledger() == {"balance": 100, "charges": 1}
