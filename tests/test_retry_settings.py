"""The package's client (mcp_idempotency.client) honours what a server declares: its maxKeyLength and
retentionSeconds, read from server/discover, and each rejection's data.retryable, falling back to data.type.
Each case runs the policy in a 2.x client (tests/retry_settings_client.py) against a real 2.x server over
stdio (tests/policy_server.py: the layer, with a key length and rejections of its own choosing)."""

import json

import pytest
from policy_clients import policy_client_report
from wire import ROOT, sdk2_python


def run(scenario: str, *server_options: str) -> dict:
    server = [sdk2_python(), str(ROOT / "tests" / "policy_server.py"), "--store", "memory", *server_options]
    return policy_client_report("retry_settings_client.py", scenario, "--", *server, timeout=60)


def test_the_policy_reads_both_settings_from_server_discover():
    assert run("settings", "--max-key-length", "20", "--retention", "2")["settings"] == [20, 2]


def test_a_callers_key_longer_than_max_key_length_is_refused_before_anything_is_sent():
    seen = run("caller-key-too-long", "--max-key-length", "20")
    assert seen["outcome"]["raised"] == "KeyTooLong" and "at most 20" in seen["outcome"]["message"]
    assert seen["charges"] == 0


def test_a_minted_key_fits_max_key_length_where_a_uuid_would_not():
    """20 characters: the policy's own key is accepted; a UUID (36), minted without the settings, is refused."""
    fitted, ignoring = (
        run(scenario, "--max-key-length", "20") for scenario in ("minted-key-fits", "minted-key-ignoring-settings")
    )
    assert fitted["outcome"] == {"result": True} and fitted["charges"] == 1
    assert ignoring["outcome"]["raised"] == "KeyRefused" and "invalid_idempotency_key" in ignoring["outcome"]["message"]
    assert "a string of 1 to 20 characters, got 36" in ignoring["outcome"]["message"]  # the server's own words


@pytest.mark.slow  # two runs of a 3 s charge against a 1 s window, in real time (9 s): a timing run
def test_past_retention_seconds_the_policy_gives_up_rather_than_send_what_may_be_a_second_call():
    """A 3 s charge, 0.3 s per attempt, a 1 s window: the policy stops within the window, saying why; told no
    window, the same loop keeps retrying until the charge's replay."""
    stopped = run("window-passed", "--retention", "1", "--charge-delay", "3")
    assert stopped["outcome"]["raised"] == "WindowPassed", stopped
    assert "keeps a key 1 s" in stopped["outcome"]["message"] and stopped["seconds"] < 1.5
    assert run("window-ignored", "--retention", "1", "--charge-delay", "3")["outcome"] == {"result": True}


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        pytest.param(
            {"type": "idempotency_rate_limited", "retryable": True},
            {"result": True},
            id="a_type_it_does_not_know_marked_retryable_is_retried",
        ),
        pytest.param(
            {"type": "idempotency_key_in_progress", "retryable": False},
            "KeyRefused",
            id="retryable_false_is_final_whatever_the_type",
        ),
        pytest.param(
            {"type": "idempotency_key_in_progress"}, {"result": True}, id="without_retryable_the_type_decides"
        ),
        pytest.param({"type": "idempotency_key_conflict"}, "KeyRefused", id="without_retryable_a_conflict_is_final"),
    ],
)
def test_the_policy_branches_on_data_retryable_and_falls_back_to_data_type(data, outcome):
    """Refused twice with `data`, then run: a retried call ends in its result, one charge."""
    seen = run("reject:" + json.dumps(data))
    assert (seen["outcome"] if isinstance(outcome, dict) else seen["outcome"]["raised"]) == outcome, seen
    assert seen["charges"] == (1 if isinstance(outcome, dict) else 0)
