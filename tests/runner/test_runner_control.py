"""Control while a turn runs: a message refused (409) or queued and delivered after, the SDK's interrupt
mid-turn, and a message that interrupts first; and what a task changed, as the runner records it: the real
Claude Code edits and commits in a git repository (the emulator's seed project), and the runner's `changes`
and `/diff` agree with git. One runner for the module, in that repository: its tests take turns on it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleet_mcp.emulator.runners.project import seed_repository
from tests.runners import RunningRunner, ScriptedAPI, needs_sdk

pytestmark = [pytest.mark.system, needs_sdk]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def runner_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("repository")
    seed_repository(work)
    return {"workdir": work, "FLEET_RUNNER_STATE_FILE": str(tmp_path_factory.mktemp("state") / "state.json")}


def _hanging(runner: RunningRunner, api: ScriptedAPI, name: str) -> tuple[str, dict[str, Any]]:
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


def test_an_edit_and_a_commit_are_recorded_as_git_sees_them(runner):
    work = runner.workdir
    if git(work, "status", "--porcelain"):  # another test's files: this turn starts from a clean tree
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "Before the turn")
    seed = git(work, "rev-parse", "HEAD").strip()
    done = runner.state()["turns"]
    assert runner.post("/message", {"content": "Rewrite calc [[edit:calc.py]] [[commit]]"}).status_code == 202
    asked = runner.wait_for(lambda s: s["state"] == "needs_input", what="the commit's permission")
    assert asked["pending"]["tool"] == "Bash" and "git commit" in asked["pending"]["summary"]
    assert runner.post("/answer", {"decision": "allow", "prompt_id": asked["pending"]["id"],
                                   "digest": asked["pending"]["digest"]}).status_code == 200
    state = runner.wait_turns(done + 1)
    result = runner.get("/result").json()["result"]
    changes = result["changes"]
    head = git(work, "rev-parse", "HEAD").strip()
    assert changes["start_commit"] == seed and changes["end_commit"] == head != seed
    assert changes["branch"] == "main" and changes["repository"] == str(work)
    assert changes["commits"] == [{"sha": head, "subject": "Scripted commit"}]
    numstat = git(work, "diff", "--numstat", seed, head).split()
    assert [f["path"] for f in changes["files"]] == ["calc.py"] and changes["files"][0]["change"] == "modified"
    assert [changes["added_lines"], changes["removed_lines"]] == [int(numstat[0]), int(numstat[1])]
    assert state["changes_summary"] == f"1 file, +{numstat[0]} −{numstat[1]}, 1 commit"
    assert state["last_turn"] == "succeeded" and state["last_cost_usd"] > 0
    assert git(work, "status", "--porcelain") == ""  # the runner left nothing in the repository's view

    diff = runner.get("/diff?format=patch").json()
    assert diff["files"][0]["path"] == "calc.py" and not diff["files"][0]["truncated"]
    assert diff["patch"] == git(work, "diff", "--full-index", seed, head)


def test_an_interrupt_at_once_ends_the_turn_even_before_claude_code_hears_it(runner):
    work = runner.workdir
    done = runner.state()["turns"]
    for n in (1, 2, 3):  # the interrupt lands while the start is noted, or just after: the turn ends either way
        assert runner.post("/message", {"content": f"Long {n} [[hang]]"}).status_code == 202
        sent = runner.post("/message", {"content": f"Instead {n} [[edit:b{n}.txt]]", "if_busy": "interrupt"})
        assert sent.status_code == 202 and sent.json()["queued"] is False, sent.text
        runner.wait_turns(done + 2 * n)
    results = runner.results()[done:]
    assert [r["interrupted"] for r in results] == [True, False] * 3
    assert all((work / f"b{n}.txt").is_file() for n in (1, 2, 3))
