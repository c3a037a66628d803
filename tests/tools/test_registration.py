"""How the tools are served: one list, tags, the read-only switch, instructions made from what is registered,
and each tool a plain function that runs alone with the service it is handed."""

from __future__ import annotations

import httpx
import pytest
from fastmcp import Client
from support import TOOLS, CheckedTransport, Tools, fleet_settings

from fleet_mcp import tools as tool_functions
from fleet_mcp.server import build_server
from fleet_mcp.serving.users import Services

# Written out, not derived from the hints: a tool that changes the fleet must never appear here by accident.
READING = {"list_agents", "show_agent", "show_agents", "show_agent_task_history", "show_agent_log",
           "get_agent_result", "show_agent_diff", "wait_for_agents", "list_agent_roles", "list_agent_projects"}


@pytest.fixture
def transport(emulator, conformance) -> CheckedTransport:
    return CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)


async def test_every_tool_is_tagged_read_or_write_as_its_hints_say(tools):
    listed = await tools.client.list_tools()
    tags = {t.name: set((t.meta or {}).get("fastmcp", {}).get("tags", [])) for t in listed}
    assert {name for name, t in tags.items() if t == {"read"}} == READING
    assert {name for name, t in tags.items() if t == {"write"}} == TOOLS - READING
    assert all(t.annotations.read_only_hint == (t.name in READING) for t in listed)


async def test_read_only_serves_only_the_reading_tools_and_refuses_a_write(emulator, transport):
    server = build_server(fleet_settings(read_only=True), transport=transport)
    async with Client(server) as client:
        assert {t.name for t in await client.list_tools()} == READING
        refused = await Tools(client).error("create_agent", name="sneaky", project="fleet-demo", spec="Do it")
        assert refused["error"] == "bad_request" and "create_agent" in refused["message"]
        assert set(refused["details"]["tools"]) == READING
        assert "read-only" in (client.instructions or "")
        projects = await Tools(client)("list_agent_projects")
    assert "fleet-demo" in [p["name"] for p in projects["projects"]]
    assert not [w for w in emulator.backend.workspaces.values() if w.name == "sneaky"]
    assert not [route for route in emulator.backend.requests if not route.startswith("GET ")]


async def test_the_instructions_name_every_registered_tool_and_only_those(tools):
    text = tools.client.instructions or ""
    listed = [t.name for t in await tools.client.list_tools()]
    assert set(listed) == TOOLS
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert [line[2:].split(":", 1)[0] for line in lines] == listed
    assert "read-only" not in text and "{error, message, details}" in text


async def test_a_tool_runs_alone_with_the_service_it_is_handed(emulator, transport):
    """No server, no MCP: the function and a `Fleet`, as a unit test would call it."""
    services = Services.open(fleet_settings(), transport)
    async with services.client:
        projects = await tool_functions.list_agent_projects(fleet=services.fleet)
        created = await tool_functions.create_agent(name="alone", project="fleet-demo", spec="Hi [[finish:1]]",
                                                    lifecycle=services.lifecycle)
        shown = await tool_functions.show_agent("alone", fleet=services.fleet)
    assert "fleet-demo" in [p.name for p in projects.projects]
    assert created.agent.name == shown.agent.name == "alone"


async def test_per_user_mode_without_a_caller_token_is_unauthorized_not_unexpected(transport):
    """The injected service refuses (no caller token): FastMCP passes its `FleetError` on, an envelope, not a fault."""
    server = build_server(fleet_settings(auth="coder", coder_session_token=None), transport=transport)
    async with Client(server) as client:
        refused = await Tools(client).error("list_agents")
    assert refused["error"] == "unauthorized", refused


async def test_the_deadline_is_the_servers_to_give_never_the_callers(tools):
    """Each tool function takes its call's deadline as an argument; the schema leaves it out and a caller
    who sends one is refused, so no caller can stretch a call past its deadline."""
    listed = await tools.client.list_tools()
    assert not [t.name for t in listed if "deadline" in t.input_schema.get("properties", {})]
    refused = await tools.error("list_agents", deadline=1e18)
    assert refused["error"] == "bad_request" and refused["details"]["field"] == "deadline", refused
