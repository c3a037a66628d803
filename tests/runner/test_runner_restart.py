"""Durability: a runner started again on the same workspace resumes the same Claude conversation from its
state file, does not send the spec again, and the model sees the earlier turns in the follow-up."""

from __future__ import annotations

import json

import pytest
from runners import needs_sdk, runner_process

pytestmark = [pytest.mark.system, needs_sdk]
SPEC = "Remember the word zebra [[edit:zebra.txt]]"


def test_a_follow_up_after_a_restart_carries_the_earlier_turns_and_a_stop_keeps_the_queue(tmp_path, api):
    """Three starts of the runner on one workspace (each start costs ~2.5 s of CPU): the spec's turn; a
    resumed follow-up, then a stop mid-turn with a message queued; the interrupted turn and the queue after."""
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
        assert runner.post("/message", {"content": "Which word did I ask you to remember?"}).status_code == 202
        state = runner.wait_turns(2)
        assert state["session_id"] == first["session_id"]
        results = runner.results()
        assert [r["task"] for r in results] == [SPEC, "Which word did I ask you to remember?"]
        assert results[1]["total_cost_usd"] > 0 and state["cost_usd"] == round(
            results[0]["total_cost_usd"] + results[1]["total_cost_usd"], 6)
        follow_up = json.dumps(api.model_requests()[-1]["messages"])
        assert "Remember the word zebra" in follow_up and "Which word did I ask you to remember?" in follow_up
        assert "zebra.txt" in follow_up  # the earlier tool use too

        assert runner.post("/message", {"content": "Wait [[hang]]"}).status_code == 202
        runner.wait_for(lambda s: s["state"] == "working")
        assert runner.post("/message", {"content": "Then this", "if_busy": "queue"}).json()["queued"] is True
    with runner_process(tmp_path, api.url) as runner:  # stopped mid-turn (SIGTERM), started again
        runner.wait_for(lambda s: s["turns"] >= 3 and s["state"] == "idle" and s["queued"] == 0)
        stopped, then = runner.results()[2:]
        assert stopped["task"] == "Wait [[hang]]" and stopped["interrupted"] is True
        assert then["task"] == "Then this" and not then["is_error"]
        assert then["session_id"] == first["session_id"]  # still the one conversation


def test_a_session_claude_code_no_longer_has_starts_a_new_conversation(tmp_path, api):
    state_file = tmp_path / "work" / ".fleet-runner" / "state.json"
    state_file.parent.mkdir(parents=True)
    gone = "6f1c9a1e-1111-4222-8333-944455556666"
    state_file.write_text(json.dumps({"version": 1, "session_id": gone, "spec_sent": True, "queue": ["Hello again"]}))
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC="Never sent twice") as runner:
        state = runner.wait_turns(1)
        assert state["session_id"] not in (None, gone) and state["error"] is None
        assert [r["task"] for r in runner.results()] == ["Hello again"]
        assert "is gone from Claude Code" in runner.logs()
