"""App statuses as they reach Coder: the runner PATCHes the emulator's
`/api/v2/workspaceagents/me/app-status` with the workspace agent's token, and the fleet reads them back
through Coder's API (working, idle marked needs-input in its uri, complete with the pull request, failure, idle).
How the reporter takes a route Coder no longer serves is in test_report_routes (in-process, no Claude Code)."""

from __future__ import annotations

import html
import time

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.runners import WAIT_S, needs_sdk, runner_process, served
from tests.support import TOKEN

pytestmark = [pytest.mark.system, needs_sdk]
WORKSPACE, SLUG = "dev-box", "code-server"  # a seeded workspace whose app no scripted AgentAPI reports for


def _agent_token(coder: httpx.Client) -> str:
    """The workspace agent's own token, as Coder hands it to the agent's processes (CODER_AGENT_TOKEN)."""
    found = coder.get(f"/emulator/agents/{WORKSPACE}/token")
    assert found.status_code == 200, found.text
    return str(found.json()["token"])


def _statuses(coder: httpx.Client) -> list[dict]:
    ws = coder.get(f"/api/v2/users/me/workspace/{WORKSPACE}").json()
    app = next(a for a in ws["latest_build"]["resources"][0]["agents"][0]["apps"] if a["slug"] == SLUG)
    return list(reversed(app["statuses"]))  # oldest first


def _wait_statuses(coder: httpx.Client, count: int) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while len(found := _statuses(coder)) < count:
        assert time.monotonic() < deadline, f"waited for {count} statuses; got {found}"
        time.sleep(0.05)
    # Coder stores messages HTML-escaped (UISanitize), as the fleet's client unescapes them.
    return [(s["state"], html.unescape(s["message"]), s["uri"]) for s in found]


def test_app_statuses_reach_coder_as_the_turns_go(tmp_path, api):
    emulator = Emulator(token=TOKEN)
    with served(emulator.app) as coder_url, httpx.Client(base_url=coder_url, timeout=10,
                                                          headers={"Coder-Session-Token": TOKEN}) as coder:
        token = _agent_token(coder)
        with runner_process(tmp_path, api.url, FLEET_RUNNER_SPEC="Ship the feature\nin detail [[pr]]",
                            FLEET_RUNNER_APP_SLUG=SLUG, CODER_AGENT_URL=coder_url, CODER_AGENT_TOKEN=token) as runner:
            runner.wait_turns(1)
            pr = "https://github.com/example/repo/pull/101"
            done = "Done after 1 tool use(s). Opened " + pr
            assert _wait_statuses(coder, 3) == [("working", "Ship the feature", ""), ("complete", done, pr),
                                                 ("idle", done, pr)]
            runner.post("/message", {"content": "Run it [[permission]]"})
            pending = runner.wait_for(lambda s: s["state"] == "needs_input")["pending"]
            asking = _wait_statuses(coder, 5)[3:]
            assert asking[0] == ("working", "Run it [[permission]]", "")
            state, message, uri = asking[1]
            assert (state, message) == ("idle", "Needs input: Bash sh -c 'echo permitted > permitted.txt'")
            assert uri.startswith("fleet-runner:needs-input?") and f"prompt={pending['id']}" in uri  # the mark
            runner.post("/answer", {"decision": "allow", "prompt_id": pending["id"], "digest": pending["digest"]})
            runner.wait_turns(2)
            runner.post("/message", {"content": "Break [[fail]]"})
            runner.wait_turns(3)
            states = [s for s, _, _ in _wait_statuses(coder, 11)]
            assert states[5:] == ["working", "complete", "idle", "working", "failure", "idle"]
        assert token not in runner.logs()
