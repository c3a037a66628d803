"""How the tools are served: one list, tags, the read-only switch, instructions made from what is registered,
and each tool a plain function that runs alone with the service it is handed."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from fastmcp import Client

from fleet_mcp import tools as tool_functions
from fleet_mcp.emulator import Emulator
from fleet_mcp.server import build_server
from fleet_mcp.serving.services import Services
from tests.conformance import Conformance
from tests.support import TOOLS, CheckedTransport, Tools, fleet_settings

# Written out, not derived from the hints: a tool that changes the fleet must never appear here by accident.
READING = {"list_agents", "show_agent", "show_agents", "show_agent_task_history", "show_agent_log",
           "get_agent_result", "show_agent_diff", "wait_for_agents", "list_agent_roles", "list_agent_projects"}


@pytest.fixture
def transport(emulator: Emulator, conformance: Conformance) -> CheckedTransport:
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
        assert named_tools(client.instructions or "") <= READING
        projects = await Tools(client)("list_agent_projects")
    assert "fleet-demo" in [p["name"] for p in projects["projects"]]
    assert not [w for w in emulator.backend.workspaces.values() if w.name == "sneaky"]
    assert not [route for route in emulator.backend.requests if not route.startswith("GET ")]


INSTRUCTIONS_MAX = 1200  # characters: clients put the instructions in every turn of the calling model
TOOL_LIST_MAX = 12_011  # characters of the tools' names, descriptions and input schemas (compact JSON), 26 Nov 2026


def named_tools(text: str) -> set[str]:
    return {name for name in TOOLS if re.search(rf"\b{name}\b", text)}


async def test_the_instructions_are_the_workflow_in_few_characters(tools):
    """What to call when (start, wait, answer, review, best of N, clean up), not a second copy of the tool list."""
    text = tools.client.instructions or ""
    listed = await tools.client.list_tools()
    assert len(text) <= INSTRUCTIONS_MAX, len(text)
    assert {"create_agent", "wait_for_agents", "answer_agent", "get_agent_result", "show_agents",
            "delete_agent"} <= named_tools(text) <= {t.name for t in listed}
    assert "never poll" in text and "Best of N" in text and "{error, message, details}" in text
    for tool in listed:  # no tool's description repeated
        assert (tool.description or "").split(". ")[0] not in text, tool.name


async def test_the_model_facing_tool_list_does_not_grow(tools):
    """Names, descriptions and input schemas: what a client loads into the model's context for the tools."""
    listed = await tools.client.list_tools()
    facing = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in listed]
    size = len(json.dumps(facing, separators=(",", ":"), ensure_ascii=False))
    assert size <= TOOL_LIST_MAX, f"the tool list grew to {size} characters (at most {TOOL_LIST_MAX})"


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


async def test_a_server_is_built_from_tools_made_once_and_ready_for_the_wire():
    """Building a server parses no tool function again (tests build hundreds: it was 186 ms a server), and each
    tool's schemas are already inlined, so a tools/list has no `$ref` left to inline for every session."""
    first, second = build_server(fleet_settings()), build_server(fleet_settings())
    made = {t.name: t for t in await first.list_tools()}
    for tool in await second.list_tools():
        assert tool.output_schema is made[tool.name].output_schema, tool.name
        assert tool.parameters is made[tool.name].parameters, tool.name
        assert not re.search(r'"\$(ref|defs)"', json.dumps([tool.parameters, tool.output_schema])), tool.name
    async with Client(second) as client:  # what a client gets is what was made
        listed = {t.name: t for t in await client.list_tools()}
    assert {name: t.output_schema for name, t in listed.items()} == {n: t.output_schema for n, t in made.items()}
