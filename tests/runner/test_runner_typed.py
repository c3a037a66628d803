"""Typed answers through the real Claude Code: a task with a result_schema ends in a validated object, or
fails; the runner reconnects (resuming the session) with the schema and again without it. One runner for the
module, started with a typed spec: its tests take turns on it."""

from __future__ import annotations

import json

import pytest

from tests.runners import needs_sdk

pytestmark = [pytest.mark.system, needs_sdk]

VERDICT = {"type": "object", "properties": {"verdict": {"enum": ["ship", "fix"]}, "score": {"type": "integer"}},
           "required": ["verdict", "score"], "additionalProperties": False}
SPEC = "Judge the seed [[json]]"


@pytest.fixture(scope="module")
def runner_settings() -> dict[str, str]:
    return {"FLEET_RUNNER_SPEC": SPEC, "FLEET_RUNNER_RESULT_SCHEMA": json.dumps(VERDICT)}


def test_the_spec_turn_answers_in_the_schema_it_was_started_with(runner):
    spec = runner.results()[0]  # the runner's first turn, whichever test came first
    assert spec["task"] == SPEC and spec["structured"] == {"verdict": "ship", "score": 1}


def test_a_typed_answer_validates_and_the_session_goes_on_untyped(runner, api):
    done = runner.state()["turns"]
    sent = runner.post("/message", {"content": "Judge it [[json]]", "result_schema": VERDICT})
    assert sent.status_code == 202 and sent.json()["queued"] is False
    runner.wait_turns(done + 1)
    typed = runner.get("/result").json()["result"]
    assert typed["is_error"] is False and typed["structured"] == {"verdict": "ship", "score": 1}
    offered = [t["name"] for t in api.model_requests()[-1]["tools"]]
    assert "StructuredOutput" in offered
    session = typed["session_id"]

    assert runner.post("/message", {"content": "Now plain work"}).status_code == 202
    runner.wait_turns(done + 2)
    plain = runner.get("/result").json()["result"]
    assert plain["is_error"] is False and plain["structured"] is None and plain["session_id"] == session
    assert "StructuredOutput" not in [t["name"] for t in api.model_requests()[-1]["tools"]]
    assert "Judge it" in str(api.model_requests()[-1]["messages"])  # the same conversation, resumed
    assert plain["total_cost_usd"] > 0 and typed["total_cost_usd"] > 0


def test_an_answer_out_of_shape_or_in_text_fails_the_turn(runner):
    done = runner.state()["turns"]
    runner.post("/message", {"content": 'Judge [[json:{"verdict":"maybe","score":1}]]', "result_schema": VERDICT})
    runner.wait_turns(done + 1)
    wrong = runner.get("/result").json()["result"]
    assert wrong["is_error"] is True and wrong["structured"] is None
    assert wrong["subtype"] == "error_max_structured_output_retries" and "result_schema" in wrong["text"]
    runner.post("/message", {"content": "Judge [[json:text]]", "result_schema": VERDICT})
    runner.wait_turns(done + 2)
    prose = runner.get("/result").json()["result"]
    assert prose["is_error"] is True and prose["subtype"] == "error_structured_output"
    assert prose["text"] == "The agent answered in text, not in result_schema's shape."


def test_a_bad_spec_schema_stops_the_runner_at_start(tmp_path, api):  # a runner of its own: it never starts
    import subprocess
    import sys

    from tests.runners import runner_env

    done = subprocess.run([sys.executable, "-m", "fleet_mcp", "runner", "--port", "0", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=runner_env(tmp_path, api.url, FLEET_RUNNER_RESULT_SCHEMA='{"type": 5}'))
    assert done.returncode == 2 and "FLEET_RUNNER_RESULT_SCHEMA" in done.stderr and not done.stdout


def test_a_bad_result_schema_is_refused_and_changes_nothing(runner):
    before = runner.state()
    for bad in ({"type": "nonsense"}, [1], {"type": "object", "description": "x" * 20_000}):
        refused = runner.post("/message", {"content": "Judge", "result_schema": bad})
        assert refused.status_code == 400 and "result_schema" in refused.json()["message"], refused.text
    assert runner.state() == before
