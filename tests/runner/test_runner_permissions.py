"""Permissions: Claude Code asks (a Bash command under acceptEdits), the runner shows it as needs_input,
and the fleet allows, denies with a message for Claude, or lets the timeout deny it."""

from __future__ import annotations

import pytest
from runners import needs_sdk, runner_process

pytestmark = [pytest.mark.system, needs_sdk]
ASK = "Run the script [[permission]]"


def _asking(runner) -> dict:
    state = runner.wait_for(lambda s: s["state"] == "needs_input", what="a permission request")
    pending = state["pending"]
    assert pending["tool"] == "Bash" and "permitted.txt" in pending["summary"] and pending["id"]
    assert not (runner.workdir / "permitted.txt").exists()
    return state


def test_a_permission_answered_allow_runs_the_command(tmp_path, api):
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=ASK) as runner:
        asked = _asking(runner)["pending"]["id"]
        answered = runner.post("/answer", {"decision": "allow", "prompt_id": asked})
        assert answered.status_code == 200 and answered.json()["state"]["state"] == "working"
        assert answered.json()["state"]["pending"] is None
        runner.wait_turns(1)
        assert (runner.workdir / "permitted.txt").read_text() == "permitted\n"
        assert runner.get("/result").json()["result"]["text"] == "Done after 1 tool use(s)."
        again = runner.post("/answer", {"decision": "allow", "prompt_id": asked}).json()
        assert again["error"] == "stale_prompt" and again["answered"]["decision"] == "allow"


def test_a_permission_answered_deny_passes_the_message_to_claude(tmp_path, api):
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=ASK) as runner:
        asked = _asking(runner)["pending"]["id"]
        assert runner.post("/answer", {"decision": "deny", "message": "Not on this branch",
                                       "prompt_id": asked}).status_code == 200
        runner.wait_turns(1)
        assert not (runner.workdir / "permitted.txt").exists()
        assert runner.get("/result").json()["result"]["text"] == "Done after 1 tool use(s). 1 refused."
        assert runner.messages()[-2]["role"] == "tool_result" and "[error]" in runner.messages()[-2]["content"]
    assert "Not on this branch" in str(api.model_requests()[-1]["messages"][-1])


def test_an_unanswered_permission_is_denied_after_the_timeout_and_the_turn_goes_on(tmp_path, api):
    with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC=ASK, FLEET_RUNNER_PERMISSION_TIMEOUT_S="1") as runner:
        _asking(runner)
        runner.wait_turns(1, timeout=10)
        assert not (runner.workdir / "permitted.txt").exists()
        result = runner.get("/result").json()["result"]
        assert result["text"] == "Done after 1 tool use(s). 1 refused." and not result["is_error"]
    assert "No answer within 1 s" in str(api.model_requests()[-1]["messages"][-1])
