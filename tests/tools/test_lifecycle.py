"""Lifecycle and budgets: stop, start, the fleet cap, autostop and budget refusals, stale fleets visible."""

from __future__ import annotations

import asyncio

import httpx
from fastmcp import Client
from fastmcp.client.transports import FastMCPTransport

from fleet_mcp.emulator import Emulator
from fleet_mcp.server import build_server
from tests.support import CheckedTransport, Tools, fleet_settings

SPEC = "Tidy the docs [[finish:1]]"


async def make(tools: Tools, emulator: Emulator, *names: str, settle: float = 60) -> None:
    for name in names:
        await tools("create_agent", name=name, project="fleet-demo", spec=SPEC)
    emulator.advance(settle)


async def test_stop_then_start_keeps_the_agent_and_its_history(tools, emulator, coder):
    await make(tools, emulator, "napper")
    before = (await tools("show_agent_task_history", agent_name="napper"))["total_count"]
    stopping = (await tools("stop_agent", agent_name="napper"))["agent"]
    assert stopping["status"] in ("pending", "stopping") and stopping["workspace_status"] in ("pending", "stopping")
    emulator.advance(30)
    builds = len((await coder.get(f"/api/v2/workspaces/{stopping['workspace_id']}/builds")).json())
    again = (await tools("stop_agent", agent_name="napper"))["agent"]  # idempotent: answers it as it is
    assert again["status"] == "stopped" and again["status_source"] == "build"
    assert len((await coder.get(f"/api/v2/workspaces/{stopping['workspace_id']}/builds")).json()) == builds
    refused = await tools.error("start_agent_task", agent_name="napper", task_description="More")
    assert refused["error"] == "bad_request" and "start_agent" in refused["message"]
    listed = (await tools("list_agents", status="stopped"))["agents"]
    assert [a["name"] for a in listed] == ["napper"] and listed[0]["last_activity_at"].endswith("Z")
    started = (await tools("start_agent", agent_name="napper"))["agent"]
    assert started["status"] in ("pending", "starting")
    emulator.advance(60)
    shown = (await tools("show_agent", agent_name="napper"))["agent"]
    assert shown["status"] == "idle" and shown["workspace_status"] == "running"
    assert (await tools("show_agent_task_history", agent_name="napper"))["total_count"] >= before
    assert (await tools("start_agent", agent_name="napper"))["agent"]["status"] == "idle"  # already started
    sent = await tools("start_agent_task", agent_name="napper", task_description="Carry on [[finish:1]]")
    assert sent["agent_status"] == "busy"


async def test_a_stopped_agent_is_deleted_without_a_start(tools, emulator, coder):
    await make(tools, emulator, "retired")
    await tools("stop_agent", agent_name="retired")
    emulator.advance(30)
    deleted = await tools("delete_agent", agent_name="retired")
    assert deleted["already_deleted"] is False
    emulator.advance(30)
    builds = (await coder.get(f"/api/v2/workspaces/{deleted['deleted_agent']['workspace_id']}/builds")).json()
    assert [b["transition"] for b in builds][:2] == ["delete", "stop"]


async def test_the_cap_holds_across_two_servers(emulator, conformance):
    def server() -> Client[FastMCPTransport]:
        transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
        return Client(build_server(fleet_settings(max_agents=3), transport=transport))

    async with server() as a, server() as b:
        one, two = Tools(a), Tools(b)
        for i, tools in enumerate([one, two, one]):
            assert (await tools("create_agent", name=f"cap-{i}", project="fleet-demo", spec=SPEC))["agent"]
        for tools in (one, two):
            refused = await tools.error("create_agent", name="cap-x", project="fleet-demo", spec=SPEC)
            assert refused["error"] == "conflict" and refused["details"] == {"agents": 3, "max_agents": 3}
            assert "FLEET_MCP_MAX_AGENTS" in refused["message"] and "Delete" in refused["message"]
        emulator.advance(60)
        assert (await one("delete_agent", agent_name="cap-0"))["already_deleted"] is False
        emulator.advance(60)
        made = await two("create_agent", name="cap-3", project="fleet-demo", spec=SPEC)
        assert made.get("agent"), made


async def test_concurrent_creates_on_two_servers_never_pass_the_cap(emulator, conformance, coder, capsys):
    """Issue 22 item 4: twelve creates at once through two servers, two places left under the cap."""
    emulator.backend.time_per_request = 0.2  # Coder's time moves as the servers poll (a cancel takes 0.5 s)

    def server() -> Client[FastMCPTransport]:
        transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
        return Client(build_server(fleet_settings(max_agents=3), transport=transport))

    async with server() as a, server() as b:
        one, two = Tools(a), Tools(b)
        await one("create_agent", name="early", project="fleet-demo", spec=SPEC)
        answers = await asyncio.gather(*((one, two)[i % 2]("create_agent", name=f"rush-{i}", project="fleet-demo",
                                                           spec=SPEC) for i in range(12)))
        made = [x["agent"]["name"] for x in answers if "agent" in x]
        refused = [x for x in answers if "agent" not in x]
        assert all(x["error"] == "conflict" and "FLEET_MCP_MAX_AGENTS=3" in x["message"] for x in refused), refused
        emulator.advance(120)
        listed = {x["name"] for x in (await one("list_agents"))["agents"]}
    over = max(0, len(listed) - 3)
    with capsys.disabled():
        print(f"\ncap 3, 1 agent, 12 concurrent creates on 2 servers: {len(made)} made, {len(refused)} refused, "
              f"agents over the cap: {over} of 12")
    assert over == 0 and listed == {"early", *made}  # every create answered as made stays; no other one does
    assert 1 <= len(made) <= 2
    taken_back = [x["details"]["name"] for x in refused if "name" in x["details"]]
    assert taken_back  # each one took its workspace back: deleted now
    for name in taken_back:
        ws = (await coder.get(f"/api/v2/users/me/workspace/{name}", params={"include_deleted": "true"})).json()
        assert ws["latest_build"]["transition"] == "delete" and ws["latest_build"]["status"] == "deleted", ws


async def test_a_held_count_never_lets_the_fleet_past_the_cap(emulator, conformance, coder):
    """Issue 21: a server's held count misses what other servers made since; the confirmation still holds."""
    emulator.backend.time_per_request = 0.2

    def server() -> Client[FastMCPTransport]:
        transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
        return Client(build_server(fleet_settings(max_agents=4), transport=transport))

    async with server() as a, server() as b, server() as c:
        one, two, three = Tools(a), Tools(b), Tools(c)
        await one("create_agent", name="a-0", project="fleet-demo", spec=SPEC)  # one holds 1 of 4
        await two("create_agent", name="b-1", project="fleet-demo", spec=SPEC)  # two holds 2 of 4
        await three("create_agent", name="c-2", project="fleet-demo", spec=SPEC)  # 3 of 4: one place left
        emulator.backend.requests.clear()
        answers = await asyncio.gather(one("create_agent", name="a-3", project="fleet-demo", spec=SPEC),
                                       two("create_agent", name="b-3", project="fleet-demo", spec=SPEC))
        # Neither counted before its create (each held a count with two places free): both were built.
        assert emulator.backend.requests["POST /api/v2/users/{user}/workspaces"] == 2
        made = [x["agent"]["name"] for x in answers if "agent" in x]
        refused = [x for x in answers if "agent" not in x]
        assert len(made) == 1 and len(refused) == 1, answers
        assert refused[0]["error"] == "conflict" and "FLEET_MCP_MAX_AGENTS=4" in refused[0]["message"]
        emulator.advance(120)
        listed = {x["name"] for x in (await one("list_agents"))["agents"]}
        assert listed == {"a-0", "b-1", "c-2", *made}  # the fleet ends at its cap
        # Both hold a count at the cap now (their confirmations counted it): a full fleet is refused before
        # anything is built.
        emulator.backend.requests.clear()
        for tools in (one, two):
            full = await tools.error("create_agent", name="late", project="fleet-demo", spec=SPEC)
            assert full["details"] == {"agents": 4, "max_agents": 4}, full
        assert "POST /api/v2/users/{user}/workspaces" not in emulator.backend.requests


async def test_a_stale_held_count_at_a_full_fleet_builds_and_takes_back(emulator, conformance, coder):
    emulator.backend.time_per_request = 0.2  # Coder's time moves as the take-back waits for the build

    def server() -> Client[FastMCPTransport]:
        transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
        return Client(build_server(fleet_settings(max_agents=3), transport=transport))

    async with server() as a, server() as b:
        one, two = Tools(a), Tools(b)
        await one("create_agent", name="mine", project="fleet-demo", spec=SPEC)  # one holds 1 of 3
        for name in ("theirs-1", "theirs-2"):
            await two("create_agent", name=name, project="fleet-demo", spec=SPEC)  # full now: one does not know
        emulator.advance(60)
        refused = await one.error("create_agent", name="over", project="fleet-demo", spec=SPEC)
        assert refused["error"] == "conflict" and refused["details"]["name"] == "over", refused
        emulator.advance(60)
        assert {x["name"] for x in (await two("list_agents"))["agents"]} == {"mine", "theirs-1", "theirs-2"}
        ws = (await coder.get("/api/v2/users/me/workspace/over", params={"include_deleted": "true"})).json()
        assert ws["latest_build"]["transition"] == "delete", ws


async def test_agents_being_deleted_do_not_count_against_the_cap(emulator, conformance):
    """Issue 23 item 4: a deleted agent leaves room at once, and a refusal says how many are on their way out."""
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(max_agents=2), transport=transport)) as client:
        tools = Tools(client)
        await make(tools, emulator, "keep", "drop")
        assert (await tools("delete_agent", agent_name="drop"))["already_deleted"] is False
        assert (await tools("create_agent", name="next", project="fleet-demo", spec=SPEC))["agent"]  # no wait
        refused = await tools.error("create_agent", name="more", project="fleet-demo", spec=SPEC)
        assert refused["error"] == "conflict"
        assert refused["details"] == {"agents": 2, "max_agents": 2, "being_deleted": 1}
        assert "not counting 1 being deleted" in refused["message"]


async def test_budgets_need_a_runner_project(tools):
    for field, value in (("model", "haiku"), ("max_turns", 5), ("max_cost_usd", 1.5)):
        refused = await tools.error("create_agent", name="thrifty", project="fleet-demo", spec=SPEC, **{field: value})
        assert refused["error"] == "bad_request" and "runner" in refused["message"], refused
    assert (await tools("list_agents"))["agents"] == []


async def test_autostop_is_bounded(tools):
    for minutes in (0, -5, 30 * 24 * 60 + 1):
        refused = await tools.error("create_agent", name="sleepy", project="fleet-demo", spec=SPEC,
                                    autostop_minutes=minutes)
        assert refused["error"] == "bad_request" and refused["details"]["field"] == "autostop_minutes"
    created = await tools("create_agent", name="sleepy", project="fleet-demo", spec=SPEC, autostop_minutes=30)
    assert created["agent"]["name"] == "sleepy"
    # Coder allows up to 30 days (its ttlMaximum); the emulator refuses more, so this went through to Coder.
    month = await tools("create_agent", name="monthly", project="fleet-demo", spec=SPEC,
                        autostop_minutes=30 * 24 * 60)
    assert month["agent"]["name"] == "monthly", month


async def test_autostop_fires_after_the_idle_ttl_and_not_while_the_agent_works(tools, emulator, coder):
    # Coder bumps a workspace's deadline by the template's activity bump whenever the agent reports work.
    made = await coder.post("/emulator/templates", json={"name": "bumpy", "activity_bump_ms": 5 * 60_000})
    assert made.status_code == 201
    await tools("create_agent", name="idle-one", project="bumpy", spec=SPEC, autostop_minutes=3)
    await tools("create_agent", name="worker", project="bumpy", spec="Long [[finish:600]]", autostop_minutes=3)
    emulator.advance(60)
    assert {a["name"]: a["status"] for a in (await tools("list_agents"))["agents"]} == \
        {"idle-one": "idle", "worker": "busy"}
    emulator.advance(6 * 60)
    statuses = {a["name"]: a["status"] for a in (await tools("list_agents"))["agents"]}
    assert statuses == {"idle-one": "stopped", "worker": "busy"}  # the worker's reports kept its deadline ahead
    shown = (await tools("show_agent", agent_name="idle-one"))["agent"]
    assert shown["status_source"] == "build"
    assert (await tools("start_agent", agent_name="idle-one"))["agent"]["status"] in ("pending", "starting")


async def test_a_template_that_schedules_its_own_stops_refuses_autostop(tools, coder):
    made = await coder.post("/emulator/templates", json={"name": "strict", "allow_user_autostop": False,
                                                         "default_ttl_ms": 3_600_000})
    assert made.status_code == 201
    refused = await tools.error("create_agent", name="strict-one", project="strict", spec=SPEC, autostop_minutes=30)
    assert refused["error"] == "bad_request" and "autostop" in refused["message"]
    created = await tools("create_agent", name="strict-one", project="strict", spec=SPEC)
    assert created["agent"]["project"] == "strict"
