"""How many Coder requests a tool makes, and how many of them wait on each other."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.emulator.state import Preset
from fleet_mcp.server import build_server
from support import CheckedTransport, Tools, fleet_settings


class Concurrency(httpx.AsyncBaseTransport):
    """Counts the requests in flight at once; each yields once on its way in, so requests sent
    together are seen together and requests sent one after another never are."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.now = self.most = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0)
            return await self.inner.handle_async_request(request)
        finally:
            self.now -= 1


@pytest.fixture
async def measured(emulator, conformance) -> AsyncIterator[tuple[Tools, Concurrency]]:
    transport = Concurrency(CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    async with Client(build_server(fleet_settings(), transport=transport)) as client:
        yield Tools(client), transport


async def test_show_agent_is_two_dependent_round_trips(measured, emulator):
    tools, transport = measured
    await tools("create_agent", name="shown", project="fleet-demo", spec="Look around [[finish:1]]")
    emulator.advance(60)
    assert (await tools("show_agent", agent_name="shown"))["agent"]["status"] == "idle"
    emulator.backend.requests.clear()
    transport.most = 0
    agent = (await tools("show_agent", agent_name="shown"))["agent"]
    assert agent["status"] == "idle" and agent["role"] == "coder"
    sent = dict(emulator.backend.requests)
    assert sum(sent.values()) == 4, sent  # the workspace, then its parameters, live state and conversation
    assert not any("/users/me" == route.split(" ")[1] for route in sent), sent
    assert transport.most == 3  # the three after the workspace go together


async def test_create_agent_with_warm_caches_makes_two_requests(emulator, conformance):
    transport = Concurrency(CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    async with Client(build_server(fleet_settings(max_agents=0), transport=transport)) as client:
        tools = Tools(client)
        await tools("list_agent_roles", project="fleet-demo")  # warms parameters and presets
        emulator.backend.requests.clear()
        created = await tools("create_agent", name="quick", project="fleet-demo", spec="Go.")
    assert created["agent"]["name"] == "quick"
    assert dict(emulator.backend.requests) == {"GET /api/v2/templates": 1, "POST /api/v2/users/{user}/workspaces": 1}


async def test_the_fleet_cap_costs_a_request_but_no_round_trip(measured, emulator):
    tools, transport = measured
    await tools("list_agent_roles", project="fleet-demo")
    emulator.backend.requests.clear()
    transport.most = 0
    await tools("create_agent", name="capped", project="fleet-demo", spec="Go.")
    assert dict(emulator.backend.requests) == {"GET /api/v2/templates": 1, "GET /api/v2/workspaces": 1,
                                               "POST /api/v2/users/{user}/workspaces": 1}
    assert transport.most == 2  # the count goes along with the templates


async def test_a_template_push_is_seen_at_once(measured, emulator):
    tools, _ = measured
    assert [r["name"] for r in (await tools("list_agent_roles", project="fleet-demo"))["roles"]] == \
        ["coder", "operator", "manager"]
    refused = await tools.error("create_agent", name="rev", project="fleet-demo", role="reviewer", spec="Review.")
    assert refused["error"] == "bad_request"
    b = emulator.backend
    template = next(t for t in b.templates.values() if t.name == "fleet-demo")
    old = b.versions[template.active_version_id]
    role = next(p for p in old.parameters if p.name == "fleet_mcp_role")
    widened = dataclasses.replace(role, options=[*role.options, {"name": "Reviewer", "value": "reviewer",
                                                                 "description": "Reviews pull requests"}])
    pushed = dataclasses.replace(old, id="7d3f9a52-0000-4000-8000-000000000001", name="fleet-demo-v2",
                                 parameters=[widened if p is role else p for p in old.parameters],
                                 presets=[*old.presets, Preset(id="7d3f9a52-0000-4000-8000-000000000002",
                                                               name="Reviewer",
                                                               parameters={"fleet_mcp_role": "reviewer"})])
    b.versions[pushed.id] = pushed
    template.active_version_id = pushed.id  # what `coder templates push` does: a new active version
    roles = [r["name"] for r in (await tools("list_agent_roles", project="fleet-demo"))["roles"]]
    assert roles == ["coder", "operator", "manager", "reviewer"]
    created = await tools("create_agent", name="rev", project="fleet-demo", role="reviewer", spec="Review.")
    assert created["agent"]["role"] == "reviewer"
