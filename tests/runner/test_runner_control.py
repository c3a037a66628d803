"""Control while a turn runs: a message refused (409) or queued and delivered after, the SDK's
interrupt mid-turn, and a message that interrupts first. One runner for the module: its tests take turns on it."""

from __future__ import annotations

import pytest
from runners import needs_sdk

pytestmark = [pytest.mark.system, needs_sdk]


def _hanging(runner, api, name: str) -> tuple[str, dict]:
    """Starts a turn whose model call hangs; waits until it is working and that call is open at the scripted API."""
    hang = f"Think forever about {name} [[hang]]"
    assert runner.post("/message", {"content": hang}).status_code == 202
    state = runner.wait_for(lambda s: s["state"] == "working" and any(
        hang in str(r["messages"]) for r in api.model_requests()), what="the hanging model call")
    return hang, state


def test_a_runner_without_a_spec_waits_idle_and_asks_the_model_nothing(runner, api):
    state = runner.state()  # the module's first test: the runner as it came up
    assert (state["state"], state["turns"], state["queued"], state["current_task"]) == ("idle", 0, 0, None)
    assert runner.messages() == [] and runner.results() == [] and runner.get("/result").json() == {"result": None}
    assert api.model_requests() == []
    assert "Traceback" not in runner.logs()


def test_an_interrupt_mid_turn_ends_it_and_the_conversation_goes_on(runner, api):
    done = runner.state()["turns"]
    hang, _ = _hanging(runner, api, "interrupts")
    stopped = runner.post("/interrupt")
    assert stopped.status_code == 202
    state = runner.wait_turns(done + 1)
    assert state["queued"] == 0
    result = runner.get("/result").json()["result"]
    assert result["interrupted"] is True and result["is_error"] is True and result["task"] == hang
    assert runner.post("/interrupt").json()["error"] == "not_running"
    assert runner.post("/message", {"content": "Carry on [[edit:carried.txt]]"}).status_code == 202
    runner.wait_turns(done + 2)
    assert runner.results()[-1]["interrupted"] is False and (runner.workdir / "carried.txt").exists()


def test_a_message_is_refused_while_working_and_a_queued_one_is_delivered_after(runner, api):
    done = runner.state()["turns"]
    hang, before = _hanging(runner, api, "queues")
    conversation = runner.messages()
    refused = runner.post("/message", {"content": "Something else"})
    assert refused.status_code == 409 and refused.json()["error"] == "busy"
    assert runner.state()["queued"] == 0 and runner.messages() == conversation
    queued = runner.post("/message", {"content": "Next, this [[edit:next.txt]]", "if_busy": "queue"})
    assert queued.status_code == 202 and queued.json()["queued"] is True
    assert runner.state()["queued"] == 1 and runner.state()["current_task"] == before["current_task"]
    assert runner.post("/interrupt").status_code == 202
    runner.wait_turns(done + 2)
    assert [r["task"] for r in runner.results()[done:]] == [hang, "Next, this [[edit:next.txt]]"]
    assert (runner.workdir / "next.txt").exists() and runner.state()["queued"] == 0


def test_a_message_with_if_busy_interrupt_stops_the_turn_and_starts_at_once(runner, api):
    done = runner.state()["turns"]
    _hanging(runner, api, "gives way")
    sent = runner.post("/message", {"content": "Instead, this", "if_busy": "interrupt"})
    assert sent.status_code == 202 and sent.json()["queued"] is False
    assert sent.json()["state"]["current_task"] == "Instead, this"
    runner.wait_turns(done + 2)
    first, second = runner.results()[done:]
    assert first["interrupted"] and not second["is_error"] and second["task"] == "Instead, this"
