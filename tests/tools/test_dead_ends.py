"""No dead ends (issue 32 item 8): a refusal says what to do instead, in words, and no internal mark of the
fleet's wire reaches a caller. In-process: the fleet server's MCP client against the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.emulator import Emulator
from fleet_mcp.errors import FORMS
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.support import CheckedTransport, Tools, fleet_settings


@pytest.fixture
async def served(emulator: Emulator, conformance: Conformance) -> AsyncIterator[Tools]:
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(), transport=transport)) as client:
        yield Tools(client)


async def test_a_read_only_server_says_a_write_tool_is_withheld_not_unknown(emulator, conformance):
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(read_only=True), transport=transport)) as client:
        refused = await Tools(client).error("create_agent", name="sneaky", project="fleet-demo", spec="Do it")
        unknown = await Tools(client).error("create_agents", name="sneaky")
    assert refused["error"] == "bad_request" and refused["details"]["read_only"] is True
    assert refused["message"].startswith("create_agent changes the fleet, and this server is read-only")
    assert "list_agents" in refused["details"]["tools"] and "create_agent" not in refused["details"]["tools"]
    assert unknown["message"] == "No tool named 'create_agents'."  # a name no server has is still unknown


async def test_a_name_or_decision_out_of_form_is_said_in_words(served):
    name = await served.error("create_agent", name="bad_name!", project="fleet-demo", spec="Do it")
    decision = await served.error("answer_agent", agent_name="someone", prompt_id="p-1", decision="yes please")
    for refused in (name, decision):
        assert refused["error"] == "bad_request", refused
        assert not set("^$[]()|\\{}") & set(refused["message"]) and "pattern" not in refused["message"], refused
    assert name["message"] == ("Invalid argument: name should be letters, digits and single hyphens, starting and "
                               "ending with a letter or digit.")
    assert decision["message"] == "Invalid argument: decision should be allow, deny, or the number of a choice, 0 to 99."


def patterns(schema: object) -> set[str]:
    if isinstance(schema, dict):
        own = {schema["pattern"]} if isinstance(schema.get("pattern"), str) else set()
        return own.union(*(patterns(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(patterns(v) for v in schema))
    return set()


async def test_every_pattern_a_tool_states_has_its_words(served):
    stated = patterns([t.input_schema for t in await served.client.list_tools()])
    assert stated and stated <= set(FORMS), stated - set(FORMS)


async def test_the_task_history_shows_no_internal_prompt_link(served, coder, emulator):
    """The runner marks a real permission prompt with a `fleet-runner:needs-input?...` uri on its app status;
    the history shows the report, not that mark (a pull-request link stays)."""
    await served("create_agent", name="asker", project="fleet-demo", spec="Look around [[finish:1]]")
    emulator.advance(60)
    token = (await coder.get("/emulator/agents/asker/token")).json()["token"]
    for uri in ("fleet-runner:needs-input?prompt=p-1&tool=Bash&input=make+test", "https://github.com/e/r/pull/7"):
        emulator.advance(1)
        reported = await coder.patch("/api/v2/workspaceagents/me/app-status", headers={"Coder-Session-Token": token},
                                     json={"app_slug": "ccw", "state": "working", "message": f"Report {uri[:5]}",
                                           "uri": uri})
        assert reported.status_code == 200, reported.text
    tasks = (await served("show_agent_task_history", agent_name="asker"))["tasks"]
    uris = {t["message"]: t["uri"] for t in tasks}
    assert uris["Report fleet"] == "" and uris["Report https"] == "https://github.com/e/r/pull/7"
    assert not [t for t in tasks if "fleet-runner:" in t["uri"]]
