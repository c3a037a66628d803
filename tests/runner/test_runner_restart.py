"""Durability: a runner started again on the same workspace resumes the same Claude conversation from its
state file, does not send the spec again, and the model sees the earlier turns in the follow-up; a stop ends
the running turn and keeps the queue; a conversation Claude Code no longer has gives way to a new one."""

from __future__ import annotations

import json

import pytest

from tests.runners import needs_sdk, runner_process

pytestmark = [pytest.mark.system, needs_sdk]
SPEC = "Remember the word zebra [[edit:zebra.txt]]"
ASKED = "Which word did I ask you to remember?"


def test_a_restart_resumes_the_conversation_a_stop_keeps_the_queue_and_a_lost_one_starts_anew(tmp_path, api):
    """Three starts of one workspace's runner (each costs ~2.8 s of CPU): the spec's turn; a resumed follow-up,
    then a stop mid-turn with a message queued; then, in a HOME without Claude Code's transcripts, a new
    conversation that runs the queue."""
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=SPEC) as runner:
        first = runner.wait_turns(1)
        state_file = runner.workdir / ".fleet-runner" / "state.json"
        saved = json.loads(state_file.read_text())
        assert saved["session_id"] == first["session_id"] and saved["spec_sent"] is True
    calls = len(api.model_requests())
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=SPEC) as runner:  # same workdir and HOME
        again = runner.wait_for(lambda s: s["state"] == "idle")
        assert again["session_id"] == first["session_id"] and again["turns"] == 1 and again["cost_usd"] > 0
        assert len(api.model_requests()) == calls  # the spec was not sent again
        assert [m["content"] for m in runner.messages() if m["role"] == "user"] == [SPEC]
        assert runner.post("/message", {"content": ASKED}).status_code == 202
        state = runner.wait_turns(2)
        assert state["session_id"] == first["session_id"]
        results = runner.results()
        assert [r["task"] for r in results] == [SPEC, ASKED]
        assert results[1]["total_cost_usd"] > 0 and state["cost_usd"] == round(
            results[0]["total_cost_usd"] + results[1]["total_cost_usd"], 6)
        follow_up = json.dumps(api.model_requests()[-1]["messages"])
        assert "Remember the word zebra" in follow_up and ASKED in follow_up
        assert "zebra.txt" in follow_up  # the earlier tool use too

        assert runner.post("/message", {"content": "Wait [[hang]]"}).status_code == 202
        runner.wait_for(lambda s: s["state"] == "working")
        assert runner.post("/message", {"content": "Then this", "if_busy": "queue"}).json()["queued"] is True
    # Stopped mid-turn (SIGTERM). Claude Code keeps its transcripts in its HOME: in a new one the saved session
    # is gone, and a new conversation beats none (the spec is still not sent again).
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=SPEC, home=tmp_path / "new-home") as runner:
        state = runner.wait_for(lambda s: s["turns"] >= 4 and s["state"] == "idle" and s["queued"] == 0)
        assert state["session_id"] not in (None, first["session_id"]) and state["error"] is None
        assert [r["task"] for r in runner.results()] == [SPEC, ASKED, "Wait [[hang]]", "Then this"]
        stopped, then = runner.results()[2:]
        assert stopped["interrupted"] is True and not then["is_error"] and then["session_id"] == state["session_id"]
        assert "is gone from Claude Code" in runner.logs()
