"""Turns of the real Claude Code through the runner: the spec as the first turn, files written in the
workdir, the role's system prompt, failures, pull-request links and costs; and the app statuses they report
as they reach Coder: the runner PATCHes the emulator's `/api/v2/workspaceagents/me/app-status` with the
workspace agent's token, and the fleet reads them back through Coder's API (working, idle marked needs-input
in its uri, complete with the pull request, failure, idle). How the reporter takes a route Coder no longer
serves is in test_report_routes (in-process, no Claude Code). One runner for the module (started with a spec
and a role, reporting to an emulated Coder): its tests take turns on it."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.runners import WAIT_S, needs_sdk, served
from tests.support import TOKEN

pytestmark = [pytest.mark.system, needs_sdk]
SPEC = "Write the plan [[edit:plan.md]]"
WORKSPACE, SLUG = "dev-box", "code-server"  # a seeded workspace whose app no scripted AgentAPI reports for
PULL = re.compile(r"https://github\.com/example/repo/pull/\d+")


@pytest.fixture(scope="module")
def coder() -> Iterator[httpx.Client]:
    with served(Emulator(token=TOKEN).app) as url, httpx.Client(base_url=url, timeout=10,
                                                              headers={"Coder-Session-Token": TOKEN}) as client:
        yield client


@pytest.fixture(scope="module")
def runner_settings(coder: httpx.Client) -> dict[str, str]:
    found = coder.get(f"/emulator/agents/{WORKSPACE}/token")  # the agent's own token, as Coder hands it over
    assert found.status_code == 200, found.text
    token = str(found.json()["token"])
    return {"FLEET_RUNNER_SPEC": SPEC, "FLEET_RUNNER_SYSTEM_PROMPT": "You are the fleet's planner.",
            "FLEET_RUNNER_APP_SLUG": SLUG, "CODER_AGENT_URL": str(coder.base_url).rstrip("/"),
            "CODER_AGENT_TOKEN": token}


def _statuses(coder: httpx.Client, count: int) -> list[tuple[str, str, str]]:
    """The app's statuses, oldest first, once Coder holds `count` of them."""
    deadline, pause = time.monotonic() + WAIT_S, 0.02
    while True:
        ws = coder.get(f"/api/v2/users/me/workspace/{WORKSPACE}").json()
        app = next(a for a in ws["latest_build"]["resources"][0]["agents"][0]["apps"] if a["slug"] == SLUG)
        if len(app["statuses"]) >= count:  # Coder stores messages HTML-escaped (UISanitize), as the fleet unescapes
            return [(s["state"], html.unescape(s["message"]), s["uri"]) for s in reversed(app["statuses"])]
        assert time.monotonic() < deadline, f"waited for {count} statuses; got {app['statuses']}"
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


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


def test_app_statuses_reach_coder_as_the_turns_go(runner, coder, runner_settings):
    assert runner.state()["turns"] == 1, "the module's second test: the spec's turn alone came first"
    spec_done = "Done after 1 tool use(s)."
    assert _statuses(coder, 3) == [("working", SPEC, ""), ("complete", spec_done, ""), ("idle", spec_done, "")]
    runner.post("/message", {"content": "Ship the feature\nin detail [[pr]]"})
    runner.wait_turns(2)
    pr = runner.get("/result").json()["result"]["pull_request_url"]
    assert PULL.fullmatch(pr)
    done = "Done after 1 tool use(s). Opened " + pr
    assert _statuses(coder, 6)[3:] == [("working", "Ship the feature", ""), ("complete", done, pr), ("idle", done, pr)]
    runner.post("/message", {"content": "Run it [[permission]]"})
    pending = runner.wait_for(lambda s: s["state"] == "needs_input")["pending"]
    asking = _statuses(coder, 8)[6:]
    assert asking[0] == ("working", "Run it [[permission]]", "")
    state, message, uri = asking[1]
    assert (state, message) == ("idle", "Needs input: Bash sh -c 'echo permitted > permitted.txt'")
    assert uri.startswith("fleet-runner:needs-input?") and f"prompt={pending['id']}" in uri  # the mark
    runner.post("/answer", {"decision": "allow", "prompt_id": pending["id"], "digest": pending["digest"]})
    runner.wait_turns(3)
    runner.post("/message", {"content": "Break [[fail]]"})
    runner.wait_turns(4)
    states = [s for s, _, _ in _statuses(coder, 14)]
    assert states[8:] == ["working", "complete", "idle", "working", "failure", "idle"]
    assert runner_settings["CODER_AGENT_TOKEN"] not in runner.logs()


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
    assert PULL.fullmatch(result["pull_request_url"]) and result["pull_request_url"] in result["text"]
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
