"""Turns of the real Claude Code through the runner: the spec as the first turn, files written in the
workdir, the role's system prompt, failures, pull-request links and costs. One runner for the module (started
with a spec and a role): its tests take turns on it."""

from __future__ import annotations

import pytest

from tests.runners import needs_sdk

pytestmark = [pytest.mark.system, needs_sdk]
SPEC = "Write the plan [[edit:plan.md]]"


@pytest.fixture(scope="module")
def runner_settings() -> dict[str, str]:
    return {"FLEET_RUNNER_SPEC": SPEC, "FLEET_RUNNER_SYSTEM_PROMPT": "You are the fleet's planner."}


def test_the_spec_runs_first_and_edits_a_file_in_the_workdir(runner, api):
    state = runner.state()
    assert state["turns"] == 1, "the module's first test sees the spec's turn alone"
    assert (runner.workdir / "plan.md").read_text() == "edited by the scripted model\n"
    assert state["current_task"] == SPEC
    assert state["session_id"] and state["cost_usd"] > 0 and state["pending"] is None
    result = runner.get("/result").json()["result"]
    assert result["task"] == SPEC and not result["is_error"]
    assert result["text"] == "Done after 1 tool use(s)." and result["subtype"] == "success"
    assert result["num_turns"] >= 2 and result["total_cost_usd"] > 0 and result["session_id"] == state["session_id"]
    assert [m["role"] for m in runner.messages()] == ["user", "assistant", "tool_use", "tool_result", "assistant"]
    assert runner.messages()[2]["content"] == "Write: plan.md"
    asked = api.model_requests()
    assert "You are the fleet's planner." in str(asked[0]["system"])
    assert "Write the plan" in str(asked[0]["messages"])


def test_a_message_runs_n_steps_and_names_its_pull_request(runner):
    done = runner.state()["turns"]
    for old in runner.workdir.glob("step-*.txt"):  # another test's steps
        old.unlink()
    sent = runner.post("/message", {"content": "Ship it [[finish:3]] [[pr]]"})
    assert sent.status_code == 202 and sent.json()["queued"] is False
    assert sent.json()["state"]["state"] == "working"
    runner.wait_turns(done + 1)
    assert sorted(p.name for p in runner.workdir.glob("step-*.txt")) == ["step-1.txt", "step-2.txt", "step-3.txt"]
    result = runner.get("/result").json()["result"]
    assert result["pull_request_url"] == "https://github.com/example/repo/pull/101"
    assert result["num_turns"] == 4 and not result["interrupted"]


def test_a_failing_turn_ends_with_is_error_and_the_next_one_works(runner):
    done = runner.state()["turns"]
    (runner.workdir / "step-1.txt").unlink(missing_ok=True)  # another test's step
    assert runner.post("/message", {"content": "Break [[fail]]"}).status_code == 202
    state = runner.wait_turns(done + 1)
    assert state["error"] is None  # the turn failed, not the runner
    failed = runner.get("/result").json()["result"]
    assert failed["is_error"] is True and failed["task"] == "Break [[fail]]"
    assert runner.post("/message", {"content": "Try again"}).status_code == 202
    runner.wait_turns(done + 2)
    assert [r["is_error"] for r in runner.results()[done:]] == [True, False]
    assert (runner.workdir / "step-1.txt").exists()
