"""list_agents, show_agent, delete_agent and the fleet's boundary, through a real MCP client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.support import Tools

SPEC = "Refactor the billing module."
OUTSIDERS = ["hand-made", "dev-box", "alice-agent"]  # made by hand, plain, another user's


async def make(tools: Tools, emulator: Emulator, *names: str, spec: str = SPEC, settle: float = 30) -> None:
    for name in names:
        await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(settle)


async def test_list_shows_only_the_token_users_managed_agents(tools, emulator):
    assert await tools("list_agents") == {"agents": [], "total_count": 0}
    await make(tools, emulator, "one", "two")
    listed = await tools("list_agents")
    assert [a["name"] for a in listed["agents"]] == ["one", "two"] and listed["total_count"] == 2
    assert all(a["project"] == "fleet-demo" for a in listed["agents"])


async def test_list_status_moves_with_the_workspace(tools, emulator):
    await tools("create_agent", name="mover", project="fleet-demo", spec=SPEC)
    seen: list[Any] = []
    for _ in range(60):
        status = (await tools("list_agents"))["agents"][0]["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        emulator.advance(0.25)
    # Busy on its spec from the moment it is created (the contract), while its workspace is built; then idle.
    assert seen == ["busy", "idle"]


async def test_list_filters(tools, emulator, coder):
    await make(tools, emulator, "f-one")
    await tools("create_agent", name="f-two", project="fleet-research", spec=SPEC)
    assert [a["name"] for a in (await tools("list_agents", project="Research Lab"))["agents"]] == ["f-two"]
    [busy] = (await tools("list_agents", status="busy"))["agents"]
    assert (busy["name"], busy["workspace_status"]) == ("f-two", "pending")  # its spec waits for its workspace
    bad = await tools.error("list_agents", status="sleeping")
    assert bad["error"] == "bad_request" and bad["details"]["problems"][0]["field"] == "status"


@pytest.mark.parametrize("name", OUTSIDERS + ["ghost", "GHOST", "a b", "owner:me", "x" * 300])
async def test_show_unknown_or_foreign_is_not_found(tools, name):
    error = await tools.error("show_agent", agent_name=name)
    assert error["error"] == "not_found"


async def test_show_a_new_agent_busy_on_its_spec_while_its_workspace_is_built(tools, emulator):
    await tools("create_agent", name="fresh", project="fleet-demo", role="manager", spec=SPEC)
    agent = (await tools("show_agent", agent_name="fresh"))["agent"]
    assert agent["status"] == "busy" and agent["workspace_status"] == "pending"
    assert (agent["role"], agent["spec"], agent["current_task"]) == ("manager", SPEC, SPEC)
    assert agent["problem"] is None


async def test_show_explains_a_failed_build(tools, emulator, coder):
    await coder.post("/emulator/templates", json={"name": "broken", "build_error": "terraform: quota exceeded"})
    await tools("create_agent", name="doomed", project="broken", spec=SPEC)
    emulator.advance(30)
    agent = (await tools("show_agent", agent_name="doomed"))["agent"]
    assert agent["status"] == "failed" and agent["problem"] == "terraform: quota exceeded"
    assert [a["status"] for a in (await tools("list_agents"))["agents"]] == ["failed"]
    assert (await tools("delete_agent", agent_name="doomed"))["deleted_agent"]["name"] == "doomed"


async def test_show_explains_a_failed_startup(tools, emulator, coder):
    await coder.post("/emulator/templates", json={"name": "flaky", "startup_error": True})
    await tools("create_agent", name="wobbly", project="flaky", spec=SPEC)
    emulator.advance(30)
    agent = (await tools("show_agent", agent_name="wobbly"))["agent"]
    assert agent["status"] == "failed" and "startup script" in agent["problem"]


async def test_delete_is_deleting_then_idempotent_then_gone(tools, emulator, coder):
    await make(tools, emulator, "bye")
    ws_id = (await coder.get("/api/v2/users/me/workspace/bye")).json()["id"]
    deleted = await tools("delete_agent", agent_name="bye")
    assert deleted["deleted_agent"] == {"name": "bye", "workspace_id": ws_id}
    # Coder says `pending` while the delete build queues; the fleet says what is happening (issue 13).
    assert (await tools("show_agent", agent_name="bye"))["agent"]["status"] == "deleting"
    assert [a["status"] for a in (await tools("list_agents"))["agents"]] == ["deleting"]
    emulator.advance(0.5)
    assert (await tools("show_agent", agent_name="bye"))["agent"]["status"] == "deleting"
    again = await tools("delete_agent", agent_name="bye")
    assert again["deleted_agent"]["workspace_id"] == ws_id and again["already_deleted"] is True
    emulator.advance(30)
    # Idempotent as annotated (issue 16): deleting what is gone says so, and a name never used stays not found.
    gone = await tools("delete_agent", agent_name="bye")
    assert gone["already_deleted"] is True and "already deleted" in gone["message"]
    assert (await tools.error("delete_agent", agent_name="never-was"))["error"] == "not_found"
    assert (await tools.error("show_agent", agent_name="bye"))["error"] == "not_found"
    assert (await coder.get(f"/api/v2/workspaces/{ws_id}")).status_code == 410


async def test_delete_while_the_first_build_runs(tools, coder):
    await tools("create_agent", name="hasty", project="fleet-demo", spec=SPEC)
    await coder.post("/emulator/clock", json={"per_request": 0.2})  # time passes as the fleet polls
    await tools("delete_agent", agent_name="hasty")
    builds = (await coder.get("/api/v2/workspaces/" + (await coder.get(
        "/api/v2/users/me/workspace/hasty")).json()["id"] + "/builds")).json()
    assert [b["transition"] for b in builds] == ["delete", "start"]
    assert builds[1]["job"]["status"] == "canceled"


@pytest.mark.parametrize("name", OUTSIDERS)
async def test_outsiders_are_never_touched(tools, emulator, coder, name):
    for tool, extra in [("delete_agent", {}), ("start_agent_task", {"task_description": "x"}),
                        ("cancel_agent_task", {}), ("show_agent_task_history", {}), ("show_agent_log", {})]:
        assert (await tools.error(tool, agent_name=name, **extra))["error"] == "not_found"
    owner = "alice" if name == "alice-agent" else "demo"
    ws = (await coder.get(f"/api/v2/users/{owner}/workspace/{name}")).json()
    assert ws["latest_build"]["transition"] == "start" and ws["latest_build"]["build_number"] == 1
    assert name not in [a["name"] for a in (await tools("list_agents"))["agents"]]


async def fleet_requests(tools: Tools, coder: httpx.AsyncClient) -> int:
    await coder.delete("/emulator/requests")
    await tools("list_agents")
    total: int = (await coder.get("/emulator/requests")).json()["total"]
    return total


async def test_list_costs_the_same_requests_at_3_and_300_agents(tools, coder):
    await coder.post("/emulator/fleet", json={"count": 3})
    at_3 = await fleet_requests(tools, coder)
    await coder.post("/emulator/fleet", json={"count": 297, "prefix": "more"})
    at_300 = await fleet_requests(tools, coder)
    assert (await tools("list_agents"))["total_count"] == 300
    assert at_3 == at_300 == 1


async def test_coder_down_is_unavailable_and_a_refused_token_unauthorized(tools, coder):
    await coder.post("/emulator/faults", json={"match": "GET /api/v2/workspaces", "kind": "status", "code": 503})
    down = await tools.error("list_agents")
    assert down["error"] == "unavailable"
    await coder.delete("/emulator/faults")
    await coder.post("/emulator/faults", json={"match": "* *", "kind": "token_expiry", "after": 0})
    refused = await tools.error("list_agents")
    assert refused["error"] == "unauthorized" and "CODER_SESSION_TOKEN" in refused["message"]
    assert "demo-token" not in refused["message"]
