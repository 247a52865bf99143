"""P6': which outcomes of a claimed key are kept and replayed, and the one that is not.

Every kind comes from a real server process on every target. The demo's tools give a
result, an isError for arguments that fail the schema, and the SDK's answer to an
unknown tool; tests/outcome_tools/sitecustomize.py adds, from outside the server, a tool
that fails as a tool, a JSON-RPC error from the tool handling, an internal failure that
escapes the SDK's handler, a tool that asks for URL elicitation (-32042) once, and (2.x) one whose
first answer is an input-required result carrying only a requestState.
"""

import json
import os

import pytest
from wire import ONE_PER_SDK, ROOT, keyed_call_line, new_key, start, text_of

# Rules the transport adds nothing to: the quick set plays them on one real transport per SDK, the slow set on the rest.
pytestmark = pytest.mark.quick_targets(*ONE_PER_SDK)

OUTCOME_TOOLS = ROOT / "tests" / "outcome_tools"


@pytest.fixture(scope="module")
def outcome_wire(target, tmp_path_factory):
    """One server per target, with the test tools of tests/outcome_tools added to its SDK."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(OUTCOME_TOOLS), os.environ.get("PYTHONPATH", "")]))
        wire = start(target, store_dir=tmp_path_factory.mktemp(target))
    yield wire
    wire.close()


# What the first answer must be, so that each row is the kind it claims: a result with
# this isError, or a JSON-RPC error with this code.
KEPT = [
    pytest.param("charge_guarded", {"amount": 100}, False, id="tool_result"),
    pytest.param("fails_as_a_tool", {}, True, id="tool_is_error"),
    pytest.param("raise_jsonrpc_error", {}, -32099, id="tool_jsonrpc_error"),
    pytest.param("no_such_tool", {}, True, id="unknown_tool"),
    pytest.param("charge_guarded", {"amount": 0}, True, id="arguments_fail_the_schema"),
    pytest.param("charge_guarded", {"amount": "100"}, True, id="arguments_of_the_wrong_type"),
    pytest.param("fail_internally", {}, -32603, id="internal_failure"),
]


@pytest.mark.parametrize(("name", "arguments", "first_answer"), KEPT)
def test_kept_outcome_is_replayed_byte_for_byte_and_the_tool_runs_once(outcome_wire, name, arguments, first_answer):
    key = new_key()
    original_line, original = keyed_call_line(outcome_wire, name, arguments, key)
    before = outcome_wire.ledger()

    _, replay = keyed_call_line(outcome_wire, name, arguments, key)

    response = json.loads(original_line)
    if isinstance(first_answer, bool):
        assert response["result"]["isError"] is first_answer
    else:
        assert response["error"]["code"] == first_answer
    # Byte equality also leaves no room for a replay marker (S2b): no _meta, nothing added.
    assert replay == original
    assert outcome_wire.ledger() == before
    # An error would look the same if the tool ran again: the log tells, one execution.
    assert outcome_wire.log().count(f"claimed: key={key!r}") == 1
    assert outcome_wire.log().count(f"replayed: key={key!r}") == 1


def test_internal_failure_leaves_no_key_running_and_the_server_serving(outcome_wire):
    key = new_key()
    first = outcome_wire.call("fail_internally", {}, key)

    retry = outcome_wire.call("fail_internally", {}, key)

    assert first["error"] == {"code": -32603, "message": "Internal error: the tool call failed unexpectedly"}
    assert retry["error"] == first["error"]  # recorded: never "in progress", never run again
    assert outcome_wire.log().count(f"recorded: key={key!r}") == 1
    assert outcome_wire.alive()


def test_url_elicitation_required_is_not_recorded_and_the_retry_runs_the_tool(outcome_wire):
    # -32042 asks the client to finish a step in the browser, then send the same request
    # again: kept, it would answer that very retry for the whole window.
    key = new_key()
    first = outcome_wire.call("needs_browser_once", {}, key)
    assert first["error"]["code"] == -32042

    retry = outcome_wire.call("needs_browser_once", {}, key)
    replay = outcome_wire.call("needs_browser_once", {}, key)

    assert text_of(retry) == "completed on run 2"  # the retry with the same key ran the tool
    assert replay["result"] == retry["result"]  # and its outcome is kept like any other
    log = outcome_wire.log()
    assert log.count(f"claimed: key={key!r}") == 2
    assert log.count(f"released: key={key!r}") == 1
    assert log.count(f"recorded: key={key!r}") == 1
    assert log.count(f"replayed: key={key!r}") == 1


@pytest.mark.targets("2x-stdio", "2x-http")
def test_a_state_only_input_required_result_is_not_recorded_and_the_leg_with_the_state_is(outcome_wire):
    """P25, the load-shedding form: only a requestState, no question; it is no outcome of the key's."""
    key = new_key()
    shed = outcome_wire.call("sheds_load_once", {}, key=key)["result"]
    again = outcome_wire.call("sheds_load_once", {}, key=key)["result"]  # not replayed: asked anew
    completed = outcome_wire.call("sheds_load_once", {}, key=key, requestState=shed["requestState"])
    replayed = outcome_wire.call("sheds_load_once", {}, key=key, requestState=again["requestState"])

    assert shed["resultType"] == again["resultType"] == "input_required" and "inputRequests" not in shed
    assert text_of(completed) == text_of(replayed) == "completed on run 1"
