"""How many Coder requests a tool makes, and how many of them wait on each other."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.coder.state import Preset, TemplateVersion
from fleet_mcp.fleet import cap
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.support import CheckedTransport, Tools, fleet_settings


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
async def measured(emulator: Emulator, conformance: Conformance) -> AsyncIterator[tuple[Tools, Concurrency]]:
    transport = Concurrency(CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    async with Client(build_server(fleet_settings(), transport=transport)) as client:
        yield Tools(client), transport


async def test_show_agent_is_two_dependent_round_trips_then_one(measured, emulator):
    tools, transport = measured
    await tools("create_agent", name="shown", project="fleet-demo", spec="Look around [[finish:1]]")
    emulator.advance(60)
    emulator.backend.requests.clear()
    transport.most = 0
    assert (await tools("show_agent", agent_name="shown"))["agent"]["status"] == "idle"
    sent = dict(emulator.backend.requests)
    assert sum(sent.values()) == 4, sent  # the workspace, then its parameters, live state and conversation
    assert not any("/users/me" == route.split(" ")[1] for route in sent), sent
    assert transport.most == 3
    emulator.backend.requests.clear()
    transport.most = 0
    agent = (await tools("show_agent", agent_name="shown"))["agent"]
    assert agent["status"] == "idle" and agent["role"] == "coder"
    sent = dict(emulator.backend.requests)
    # A build's parameters never change: asked once per build. An agent seen ready is asked where it was
    # along with its workspace: three requests, all at once.
    assert sent == {"GET /api/v2/users/{user}/workspace/{workspacename}": 1,
                    "GET /@{owner}/{workspace}/apps/{slug}/status": 1,
                    "GET /@{owner}/{workspace}/apps/{slug}/messages": 1}, sent
    assert transport.most == 3


async def test_an_agent_stopped_since_it_was_seen_is_shown_stopped(measured, emulator):
    tools, _ = measured
    await tools("create_agent", name="napper", project="fleet-demo", spec="Work [[finish:1]]")
    emulator.advance(60)
    assert (await tools("show_agent", agent_name="napper"))["agent"]["status"] == "idle"
    b = emulator.backend
    ws = next(w for w in b.workspaces.values() if w.name == "napper")
    b.create_build(next(u for u in b.users.values() if u.username == "demo"), ws.id, {"transition": "stop"})
    emulator.advance(60)
    agent = (await tools("show_agent", agent_name="napper"))["agent"]
    assert agent["status"] == "stopped" and agent["problem"] is None, agent
    emulator.backend.requests.clear()
    await tools("show_agent", agent_name="napper")
    assert not any(route.startswith("GET /@") for route in emulator.backend.requests)  # no longer asked early


async def test_a_new_build_has_its_parameters_asked_again(measured, emulator):
    tools, _ = measured
    await tools("create_agent", name="rebuilt", project="fleet-demo", spec="Work [[finish:1]]")
    emulator.advance(60)
    await tools("show_agent", agent_name="rebuilt")
    b = emulator.backend
    ws = next(w for w in b.workspaces.values() if w.name == "rebuilt")
    b.create_build(next(u for u in b.users.values() if u.username == "demo"), ws.id, {"transition": "stop"})
    emulator.advance(60)
    emulator.backend.requests.clear()
    agent = (await tools("show_agent", agent_name="rebuilt"))["agent"]
    assert agent["status"] == "stopped" and agent["role"] == "coder"
    assert emulator.backend.requests["GET /api/v2/workspacebuilds/{workspacebuild}/parameters"] == 1


async def test_create_agent_with_warm_caches_makes_two_requests(emulator, conformance):
    transport = Concurrency(CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    async with Client(build_server(fleet_settings(max_agents=0), transport=transport)) as client:
        tools = Tools(client)
        await tools("list_agent_roles", project="fleet-demo")  # warms the listing, parameters and presets
        emulator.backend.requests.clear()
        created = await tools("create_agent", name="quick", project="fleet-demo", spec="Go.")
    assert created["agent"]["name"] == "quick"
    assert dict(emulator.backend.requests) == {"POST /api/v2/users/{user}/workspaces": 1}


async def test_the_fleet_cap_costs_two_counts(emulator, conformance):
    # One count before the create refuses a full fleet without provisioning anything; one after it
    # confirms the cap under concurrent creates (specs/tools.md item 19). A server that holds no count
    # of its own (here: one that has created nothing yet) asks for both.
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(), transport=transport)) as client:
        tools = Tools(client)
        await tools("list_agent_roles", project="fleet-demo")  # caches the listing, holds no count
        emulator.backend.requests.clear()
        await tools("create_agent", name="capped", project="fleet-demo", spec="Go.")
    assert dict(emulator.backend.requests) == {"GET /api/v2/workspaces": 2, "POST /api/v2/users/{user}/workspaces": 1}


async def test_a_warm_create_under_the_cap_makes_two_requests(measured, emulator):
    # Issue 21: the count before a create is the one this server's last create confirmed (moved by what
    # it did since): the POST and the confirming count are all a warm create asks of Coder.
    tools, _ = measured
    await tools("create_agent", name="first", project="fleet-demo", spec="Go.")  # caches the listing, a count
    for name in ("second", "third"):
        emulator.backend.requests.clear()
        assert (await tools("create_agent", name=name, project="fleet-demo", spec="Go."))["agent"]["name"] == name
        assert dict(emulator.backend.requests) == {"GET /api/v2/workspaces": 1,
                                                   "POST /api/v2/users/{user}/workspaces": 1}


async def test_the_last_places_and_an_old_count_are_counted_afresh(emulator, conformance, monkeypatch):
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(max_agents=3), transport=transport)) as client:
        tools = Tools(client)
        await tools("create_agent", name="one", project="fleet-demo", spec="Go.")
        emulator.backend.requests.clear()
        await tools("create_agent", name="two", project="fleet-demo", spec="Go.")  # 1 of 3 held: two places free
        assert emulator.backend.requests["GET /api/v2/workspaces"] == 1
        emulator.backend.requests.clear()
        await tools("create_agent", name="three", project="fleet-demo", spec="Go.")  # the last place: asked
        assert emulator.backend.requests["GET /api/v2/workspaces"] == 2
        emulator.advance(60)
        for name in ("three", "two"):  # 1 of 3 held again: its own deletes are counted
            assert (await tools("delete_agent", agent_name=name))["already_deleted"] is False
        emulator.advance(60)
        emulator.backend.requests.clear()
        await tools("create_agent", name="four", project="fleet-demo", spec="Go.")
        assert emulator.backend.requests["GET /api/v2/workspaces"] == 1
        monkeypatch.setattr(cap, "HELD_S", 0.0)  # every held count is too old now
        emulator.backend.requests.clear()
        await tools("create_agent", name="five", project="fleet-demo", spec="Go.")
        assert emulator.backend.requests["GET /api/v2/workspaces"] == 2


async def test_the_listing_is_asked_again_once_its_ttl_is_over(emulator, conformance):
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(template_cache_s=0), transport=transport)) as client:
        tools = Tools(client)
        await tools("create_agent", name="one", project="fleet-demo", spec="Go.")
        emulator.backend.requests.clear()
        await tools("create_agent", name="two", project="fleet-demo", spec="Go.")
    assert emulator.backend.requests["GET /api/v2/templates"] == 1


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


def push(emulator: Emulator, template_name: str = "fleet-demo", *, role: str | None = None) -> TemplateVersion:
    """A new active version of the template, as `coder templates push` makes (new ids for its presets);
    `role` adds one more role option and a preset for it."""
    b = emulator.backend
    template = next(t for t in b.templates.values() if t.name == template_name)
    old = b.versions[template.active_version_id]
    params, presets = list(old.parameters), [dataclasses.replace(p, id=str(uuid.uuid4())) for p in old.presets]
    if role:
        param = next(p for p in params if p.name == "fleet_mcp_role")
        params[params.index(param)] = dataclasses.replace(param, options=[
            *param.options, {"name": role.title(), "value": role, "description": f"The {role}"}])
        presets.append(Preset(id=str(uuid.uuid4()), name=role.title(), parameters={"fleet_mcp_role": role}))
    pushed = dataclasses.replace(old, id=str(uuid.uuid4()), name=f"{template_name}-{len(b.versions)}",
                                 parameters=params, presets=presets)
    b.versions[pushed.id] = pushed
    template.active_version_id = pushed.id
    return pushed


async def test_a_create_right_after_a_push_uses_the_new_version(measured, emulator):
    tools, _ = measured
    await tools("create_agent", name="before", project="fleet-demo", spec="Go.")  # the listing is cached now
    pushed = push(emulator)
    emulator.backend.requests.clear()
    created = await tools("create_agent", name="after", project="fleet-demo", role="operator", spec="Go.")
    assert created["agent"]["role"] == "operator"
    b = emulator.backend
    ws = next(w for w in b.workspaces.values() if w.name == "after")
    assert ws.latest_build.template_version_id == pushed.id
    # Coder refused the old version's preset; the listing was asked again and the create made once.
    assert b.requests["GET /api/v2/templates"] == 1
    assert b.requests["POST /api/v2/users/{user}/workspaces"] == 2
    assert [w.name for w in b.workspaces.values()].count("after") == 1


async def test_a_role_the_cached_listing_lacks_is_asked_of_coder(measured, emulator):
    tools, _ = measured
    await tools("create_agent", name="before", project="fleet-demo", spec="Go.")
    push(emulator, role="reviewer")
    created = await tools("create_agent", name="rev", project="fleet-demo", role="reviewer", spec="Review.")
    assert created["agent"]["role"] == "reviewer"
    refused = await tools.error("create_agent", name="nope", project="fleet-demo", role="pilot", spec="Fly.")
    assert refused["error"] == "bad_request" and "reviewer" in refused["details"]["roles"]


async def test_show_agents_asks_the_agents_last_seen_ready_along_with_the_listing(measured, emulator):
    tools, transport = measured
    for name in ("g1", "g2", "g3"):
        await tools("create_agent", name=name, project="fleet-demo", spec=f"Work {name} [[finish:1]]")
    emulator.advance(60)
    first = await tools("show_agents", agent_names=["g1", "g2", "g3"])
    emulator.backend.requests.clear()
    transport.most = 0
    again = await tools("show_agents", agent_names=["g1", "g2", "g3"])
    assert again == first
    assert sum(emulator.backend.requests.values()) == 4  # the listing and three conversations, all at once
    assert transport.most == 4

    b = emulator.backend
    ws = next(w for w in b.workspaces.values() if w.name == "g2")
    b.create_build(next(u for u in b.users.values() if u.username == "demo"), ws.id, {"transition": "stop"})
    emulator.advance(60)
    stopped = {a["name"]: a for a in (await tools("show_agents", agent_names=["g1", "g2", "g3"]))["agents"]}
    assert stopped["g2"]["status"] == "stopped" and stopped["g2"]["latest_output"] is None
    assert stopped["g1"] == first["agents"][0]
    emulator.backend.requests.clear()
    await tools("show_agents", agent_names=["g1", "g2", "g3"])
    assert sum(emulator.backend.requests.values()) == 3  # a stopped agent is no longer asked early
