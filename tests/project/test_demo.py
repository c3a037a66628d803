"""`fleet-mcp demo` as a real process: every step of the tour runs and is named, in under a minute.

With the `runner` extra installed (CI installs it) the agents are the real Claude Code: the tour shows it
write files, ask a permission the tour answers, and report a result with its cost."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.system

STEPS = ["1. Projects", "2. Roles", "3. Create two agents", "4. Wait for the builder's spec", "5. Show the builder",
         "6. The builder's result", "7. A follow-up that asks permission", "8. Answer it",
         "9. Review the builder's work", "10. A typed answer", "11. Task history", "12. Conversation log",
         "13. Cancel the sleeper's task", "14. Delete both agents"]


@dataclass
class DemoRun:
    done: subprocess.CompletedProcess[str]
    cpu_s: float  # the demo, its runners and their Claude Codes


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`fleet-mcp demo`, run once for the tests that read what it printed (a run costs about 10 s of CPU)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODER_", "FLEET_MCP_"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "fleet_mcp", "demo"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path_factory.mktemp("demo"), env=env, stdin=subprocess.DEVNULL,
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return DemoRun(done, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def test_demo_tours_every_tool_in_under_a_minute(demo):
    done = demo.done
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Bounded in CPU seconds (the demo, its runners and their Claude Codes), which a loaded machine does not
    # stretch as it stretches wall time (about 10 s idle, 66 s at load 10, 30 s for Claude Code to start at 16).
    assert demo.cpu_s < 60, demo.cpu_s
    out = done.stdout  # not a TTY: plain text, no colour codes
    assert "\x1b[" not in out
    positions = [out.find(step) for step in STEPS]
    assert -1 not in positions, [s for s, p in zip(STEPS, positions, strict=True) if p == -1]
    assert positions == sorted(positions)
    for tool in ["list_agent_projects", "list_agent_roles", "create_agent", "show_agent", "start_agent_task",
                 "show_agent_task_history", "show_agent_log", "cancel_agent_task", "delete_agent", "list_agents",
                 "wait_for_agents", "show_agents", "get_agent_result", "answer_agent"]:
        assert tool in out
    assert "needs_input" in out and "decision=allow" in out  # the permission asked, and answered
    assert "https://github.com/example/repo/pull/" in out  # the builder's [[pr]] reached show_agent
    assert "Task canceled." in out and "Tour complete" in out
    assert "Traceback" not in done.stderr


async def test_a_failing_step_is_exit_1_with_the_step_named(monkeypatch):
    import io

    from rich.console import Console

    from fleet_mcp import demo

    monkeypatch.setattr(demo, "PROJECT", "no-such-project")
    out = io.StringIO()
    assert await demo.tour(Console(file=out, width=100)) == 1
    text = out.getvalue()
    assert "1. Projects" in text
    assert "fleet-mcp demo: step 2. Roles failed: list_agent_roles answered an error" in text
    assert '"error": "not_found"' in text and "3. Create two agents" not in text


def test_with_the_runner_installed_the_demo_runs_the_real_claude_code(demo):
    from fleet_mcp.demo import runner_installed

    if not runner_installed():
        pytest.skip("claude-agent-sdk is not installed (pip install -e '.[runner]'); CI installs it")
    done = demo.done  # the same run: with the runner installed, `fleet-mcp demo` is this demo
    assert done.returncode == 0, done.stdout[-3000:]
    out = done.stdout
    assert "the agents are the real Claude Code" in out
    assert "Write: step-" in out and "Bash: " in out  # Claude Code's own tools ran in the workspace directory
    assert "runner" in out and "total_cost_usd" in out
    assert "show_agent_diff builder scope=agent" in out and "step-1.txt" in out  # the builder's work, as a diff
    assert "'ready': True" in out and "'risk': 'low'" in out  # the typed answer, validated
