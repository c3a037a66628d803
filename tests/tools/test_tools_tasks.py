"""Working agents: show live, task history, log, start and cancel tasks — through a real MCP client."""

from __future__ import annotations

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.support import Tools


async def make(tools: Tools, emulator: Emulator, name: str, spec: str, settle: float = 30) -> None:
    await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(settle)


async def polls_move_time(coder: httpx.AsyncClient, seconds: float = 0.1) -> None:
    await coder.post("/emulator/clock", json={"per_request": seconds})


async def test_first_turn_runs_the_spec_then_idles(tools, emulator):
    await tools("create_agent", name="worker", project="fleet-demo", spec="Write the parser [[finish:5]]")
    emulator.advance(4)  # up and working
    agent = (await tools("show_agent", agent_name="worker"))["agent"]
    assert agent["status"] == "busy" and agent["workspace_status"] == "running"
    assert [a["status"] for a in (await tools("list_agents"))["agents"]] == ["busy"]
    emulator.advance(30)
    agent = (await tools("show_agent", agent_name="worker"))["agent"]
    assert agent["status"] == "idle" and agent["problem"] is None
    assert agent["current_task"] == "Making changes: Write the parser"  # what it last said it works on
    listed = (await tools("list_agents"))["agents"][0]
    assert listed["status"] == "idle" and listed["current_task"] == agent["current_task"]
    tasks = (await tools("show_agent_task_history", agent_name="worker"))["tasks"]
    assert [t["state"] for t in tasks][:2] == ["complete", "working"]  # one entry per turn end
    assert tasks[-1]["state"] == "working"
    assert not any(t["needs_user_attention"] for t in tasks)
    assert all(t["created_at"].endswith("Z") for t in tasks)


async def test_follow_up_task_then_conflict_while_busy(tools, emulator):
    await make(tools, emulator, "helper", "Set things up [[finish:2]]")
    started = await tools("start_agent_task", agent_name="helper", task_description="Now add tests [[finish:10]]")
    assert started["agent_status"] == "busy" and started["task"]["message"] == "Now add tests [[finish:10]]"
    assert started["task"]["created_at"].endswith("Z")
    agent = (await tools("show_agent", agent_name="helper"))["agent"]
    assert agent["status"] == "busy" and agent["current_task"] == "Now add tests [[finish:10]]"
    busy = await tools.error("start_agent_task", agent_name="helper", task_description="And docs")
    assert busy["error"] == "conflict" and "already has a running task" in busy["message"]
    emulator.advance(30)
    assert (await tools("show_agent", agent_name="helper"))["agent"]["status"] == "idle"
    log = await tools("show_agent_log", agent_name="helper")
    roles = [m["role"] for m in log["messages"]]
    assert roles[:2] == ["agent", "user"]  # newest first
    assert log["messages"][1]["content"] == "Now add tests [[finish:10]]"


async def test_cancel_interrupts_a_running_task(tools, emulator, coder):
    await make(tools, emulator, "stuck", "Spin forever [[hang]]")
    assert (await tools("show_agent", agent_name="stuck"))["agent"]["status"] == "busy"
    await polls_move_time(coder)
    cancelled = await tools("cancel_agent_task", agent_name="stuck")
    assert cancelled["agent_status"] == "idle" and cancelled["task"]["message"].endswith(" - canceled")
    assert (await tools("show_agent", agent_name="stuck"))["agent"]["status"] == "idle"
    again = await tools.error("cancel_agent_task", agent_name="stuck")
    assert again["error"] == "bad_request" and "idle" in again["message"]


async def test_cancel_refused_on_acp_transport(tools, emulator):
    await make(tools, emulator, "acp", "Talk over ACP [[acp]] [[hang]]")
    error = await tools.error("cancel_agent_task", agent_name="acp")
    assert error["error"] == "bad_request" and "ESC" in error["message"]
    assert (await tools("show_agent", agent_name="acp"))["agent"]["status"] == "busy"


async def test_pull_request_link_is_reported(tools, emulator):
    await make(tools, emulator, "pr-maker", "Open a PR [[pr]] [[finish:2]]")
    agent = (await tools("show_agent", agent_name="pr-maker"))["agent"]
    assert agent["metadata"]["fleet_mcp_pull_request_url"].startswith("https://github.com/")
    assert "/pull/" in agent["metadata"]["fleet_mcp_pull_request_url"]


@pytest.mark.parametrize("spec", ["Give up [[fail]] [[finish:2]]", "Ask first [[permission]]"])
async def test_failures_and_questions_need_attention(tools, emulator, spec):
    await make(tools, emulator, "asker", spec)
    tasks = (await tools("show_agent_task_history", agent_name="asker"))["tasks"]
    assert tasks[0]["needs_user_attention"] is True, tasks


async def test_history_pagination(tools, emulator):
    await make(tools, emulator, "chatty", "Chat [[finish:1]]")
    for i in range(3):
        await tools("start_agent_task", agent_name="chatty", task_description=f"step {i} [[finish:1]]")
        emulator.advance(10)
    full = await tools("show_agent_task_history", agent_name="chatty", page_size=100)
    total = full["total_count"]
    assert total == len(full["tasks"]) >= 8
    page2 = await tools("show_agent_task_history", agent_name="chatty", page=2, page_size=3)
    assert page2["tasks"] == full["tasks"][3:6]
    assert (page2["page"], page2["page_size"], page2["total_pages"]) == (2, 3, -(-total // 3))
    assert (await tools("show_agent_task_history", agent_name="chatty", page_size=0))["page_size"] == 1
    assert (await tools("show_agent_task_history", agent_name="chatty", page_size=1000))["page_size"] == 100
    assert (await tools("show_agent_task_history", agent_name="chatty", page=99))["tasks"] == []
    for page in (0, -1):
        error = await tools.error("show_agent_task_history", agent_name="chatty", page=page)
        assert error["error"] == "bad_request"
    bad = await tools.error("show_agent_task_history", agent_name="chatty", page="two")
    assert bad["error"] == "bad_request" and bad["details"]["problems"][0]["field"] == "page"


async def test_log_cuts_long_messages(tools, emulator):
    await make(tools, emulator, "long", "Short spec [[finish:1]]")
    await tools("start_agent_task", agent_name="long", task_description="x" * 5_000 + " [[finish:1]]")
    emulator.advance(10)
    log = await tools("show_agent_log", agent_name="long", page_size=100)
    user = next(m for m in log["messages"] if m["role"] == "user")
    assert user["truncated"] is True and len(user["content"]) == 4_000
    assert all(not m["truncated"] for m in log["messages"] if m["role"] == "agent")
    assert log["total_count"] == len(log["messages"])


async def test_stopped_agent_cannot_take_tasks(tools, emulator, coder):
    await make(tools, emulator, "napper", "Nap [[finish:1]]")
    ws = (await coder.get("/api/v2/users/me/workspace/napper")).json()
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    emulator.advance(10)
    agent = (await tools("show_agent", agent_name="napper"))["agent"]
    assert agent["status"] == "stopped"
    tasks = (await tools("show_agent_task_history", agent_name="napper"))["tasks"]
    assert tasks  # history survives the stop, read from the last start build
    error = await tools.error("start_agent_task", agent_name="napper", task_description="wake up")
    assert error["error"] == "bad_request" and "stopped" in error["message"]
    assert (await tools.error("show_agent_log", agent_name="napper"))["error"] == "bad_request"


async def test_agentapi_down_is_offline_with_a_reason(tools, emulator, coder):
    await make(tools, emulator, "ghosty", "Work [[finish:1]]")
    await coder.post("/emulator/agents/ghosty/process", json={"running": False})
    agent = (await tools("show_agent", agent_name="ghosty"))["agent"]
    assert agent["status"] == "offline" and "AgentAPI" in agent["problem"]
    error = await tools.error("start_agent_task", agent_name="ghosty", task_description="hello")
    assert error["error"] == "bad_request" and "offline" in error["message"]


@pytest.mark.parametrize("description", ["", "   ", "x" * 65_537])
async def test_bad_task_descriptions(tools, emulator, description):
    await make(tools, emulator, "picky", "Wait [[finish:1]]")
    error = await tools.error("start_agent_task", agent_name="picky", task_description=description)
    assert error["error"] == "bad_request"
    log = await tools("show_agent_log", agent_name="picky")
    assert not any(m["role"] == "user" for m in log["messages"])


async def test_unknown_agents_are_not_found_everywhere(tools):
    for tool, extra in [("start_agent_task", {"task_description": "x"}), ("cancel_agent_task", {}),
                        ("show_agent_task_history", {}), ("show_agent_log", {}), ("delete_agent", {})]:
        assert (await tools.error(tool, agent_name="nobody", **extra))["error"] == "not_found"


async def test_show_reports_agentapi_errors_over_a_real_socket(emulator, conformance):
    """`agent_error` only travels on AgentAPI's event stream, which needs a real socket to read."""
    import httpx
    from fastmcp import Client

    from fleet_mcp.emulator.app import running
    from fleet_mcp.server import build_server
    from tests.support import CheckedTransport, Tools, fleet_settings

    async with running(emulator) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": "demo-token"}) as coder:
            await coder.post("/emulator/templates", json={"name": "crashy", "startup_error": True})
            settings = fleet_settings(coder_url=url, agent_error_wait_s=2.0)
            transport = CheckedTransport(httpx.AsyncHTTPTransport(), conformance)
            async with Client(build_server(settings, transport=transport)) as client:
                tools = Tools(client)
                await tools("create_agent", name="crashy-1", project="crashy", spec="Work [[hang]]")
                emulator.advance(30)
                r = await coder.post("/emulator/agents/crashy-1/error",
                                     json={"message": "claude exited: invalid API key", "level": "error"})
                assert r.status_code < 300, r.text
                agent = (await tools("show_agent", agent_name="crashy-1"))["agent"]
    assert agent["status"] == "failed"
    assert "startup script" in agent["problem"] and "claude exited: invalid API key" in agent["problem"]
