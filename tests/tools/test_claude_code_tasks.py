"""The real interactive Claude Code (the CLI claude-agent-sdk bundles) as the orchestrator, in tmux, its model
scripted: wait_for_agents moves to the background, an agent's permission prompt appears as Claude Code's
dialog and is accepted with a key press (the agent's command really runs), and the task's notification wakes
the model with the agents' results. Real processes throughout: `system`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from fleet_mcp.emulator.runners.anthropic import Reply, messages_app
from tests.runners import disk, needs_sdk, runner_fleet, served
from tests.support import TOKEN

pytestmark = [pytest.mark.system, needs_sdk,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")]

WAIT = "mcp__fleet__wait_for_agents"


def claude_binary() -> Path:
    import claude_agent_sdk

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


class Orchestrator:
    """The orchestrator's scripted model: asked to wait, it calls wait_for_agents; told the call went to the
    background, it says so; woken by the task's notification, it reports what the notification carried."""

    def __init__(self) -> None:
        self.notifications: list[str] = []
        self.woken_at: float | None = None

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        last = json.dumps(messages[-1] if messages else {})
        if "Wait for the fleet" not in json.dumps(body.get("messages")):
            return Reply(text="Fleet")  # Claude Code's own side requests (titles, summaries)
        if WAIT not in [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]:
            return Reply(text="NOT CONNECTED yet")  # the fleet's server still starting: the test asks again
        if "task-notification" in last:
            self.notifications.append(last)
            self.woken_at = self.woken_at or time.time()
            return Reply(text="NOTIFIED tm-ask " + ("succeeded" if "succeeded" in last else "unclear"))
        if '"tool_result"' in last:
            return Reply(text="WAITING in the background")
        return Reply(tool=WAIT, tool_input={"agent_names": ["tm-ask"], "timeout_s": 300})


class Pane:
    """Claude Code in a tmux session of its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[str] = []

    def text(self) -> str:
        shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True,
                               check=False).stdout
        self.seen.append(shown)
        return shown

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    async def until(self, words: str, timeout: float = 120) -> str:
        ends = time.monotonic() + timeout
        while time.monotonic() < ends:
            if words in (shown := self.text()):
                return shown
            await asyncio.sleep(0.5)
        raise AssertionError(f"{words!r} never showed; the screen:\n{self.seen[-1] if self.seen else ''}")


async def test_claude_code_waits_in_the_background_and_asks_the_human(conformance, tmp_path):
    orchestrator = Orchestrator()
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / ".claude.json").write_text(json.dumps({  # past the first run's screens: onboarded, folder trusted
        "hasCompletedOnboarding": True, "theme": "dark", "customApiKeyResponses": {"approved": ["sk-test-offline"]},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}))
    async with runner_fleet(conformance) as (tools, coder):
        await tools("create_agent", name="tm-ask", project="fleet-demo", spec="Run it [[permission]]")
        fleet = {"command": sys.executable, "args": ["-m", "fleet_mcp"],
                 "env": {"CODER_URL": str(coder.base_url).rstrip("/"), "CODER_SESSION_TOKEN": TOKEN,
                         "FLEET_MCP_WAIT_POLL_INTERVAL_S": "1"}}
        (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"fleet": fleet}}))
        with served(messages_app(orchestrator)) as api:
            env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TERM": "xterm-256color", "ANTHROPIC_BASE_URL": api,
                   "ANTHROPIC_API_KEY": "sk-test-offline", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                   "ENABLE_TOOL_SEARCH": "false"}
            command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(claude_binary()), "--mcp-config",
                       str(tmp_path / "mcp.json"), "--strict-mcp-config", "--allowedTools", WAIT]
            name = f"fleet-{tmp_path.name}"[:40]
            subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "60", "-c", str(work),
                            " ".join(f"'{c}'" for c in command)], check=True)
            pane = Pane(name)
            try:
                await pane.until("❯", 60)
                for _ in range(20):  # asked again until Claude Code has connected to the fleet's server
                    pane.keys("Wait for the fleet", "Enter")
                    with contextlib.suppress(AssertionError):
                        await pane.until("WAITING in the background", 8)  # the wait moved to the background
                        break
                await pane.until("WAITING in the background", 1)
                dialog = await pane.until("Accept", 120)  # the agent's prompt, as Claude Code's dialog
                assert "MCP server “fleet” requests your input" in dialog and "tm-ask" in dialog
                assert "Bash" in dialog and "echo permitted > permitted.txt" in dialog  # the tool's whole input
                assert "Allow: ☒" in dialog  # allow is ticked already: accepting allows
                for _ in range(5):
                    if "❯ Accept" in pane.text():
                        break
                    pane.keys("Down")
                    await asyncio.sleep(0.5)
                pane.keys("Enter")
                await pane.until("NOTIFIED tm-ask", 180)  # the task's notification woke the model
            finally:
                subprocess.run(["tmux", "kill-session", "-t", name], check=False)
        listed = (await tools("list_agents"))["agents"][0]
        assert (await disk(coder, "tm-ask") / "permitted.txt").is_file()  # the human allowed it: it really ran
    [notification] = orchestrator.notifications
    assert "tm-ask" in notification and "succeeded" in notification  # the agents' results, in the notification
    assert listed["status"] == "idle" and listed["last_turn"] == "succeeded"
    finished = datetime.fromisoformat(listed["status_since"].replace("Z", "+00:00")).timestamp()
    assert orchestrator.woken_at is not None
    print(f"agent finished -> orchestrator woken: {orchestrator.woken_at - finished:.1f} s (status_since has whole "
          "seconds)")
