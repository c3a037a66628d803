"""A new user's second hour (issue 23): progress on its promised beat, counting agents; words for people."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.emulator import Emulator
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.support import CheckedTransport, Tools, fleet_settings


@pytest.fixture
async def slow_polls(emulator: Emulator, conformance: Conformance) -> AsyncIterator[Tools]:
    """The fleet's tools polling Coder once a second, promising progress five times as often."""
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    settings = fleet_settings(wait_poll_interval_s=1.0, progress_interval_s=0.2)
    async with Client(build_server(settings, transport=transport)) as client:
        yield Tools(client)


async def make(tools: Tools, emulator: Emulator, *agents: tuple[str, str]) -> None:
    for name, spec in agents:
        await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(30)


async def test_progress_keeps_its_interval_between_polls_and_counts_agents(slow_polls, emulator):
    await make(slow_polls, emulator, ("quick", "Quick [[finish:1]]"), ("stuck", "Forever [[hang]]"))
    emulator.backend.requests.clear()
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, float, float | None, str | None]] = []

    async def progress(done, total, message):
        seen.append((loop.time(), done, total, message))

    answer = await slow_polls("wait_for_agents", progress=progress, agent_names=["quick", "stuck"], timeout_s=1.0)
    assert answer["timed_out"] is True and answer["met"] == ["quick"]
    # Every 0.2 s though Coder is asked once a second: the first at once, then four more (a busy machine may
    # make some late, never as late as the next poll).
    assert len(seen) >= 4, seen
    gaps = [b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False)]
    assert sorted(gaps)[len(gaps) // 2] < 0.2 + 0.2 and max(gaps) < 0.9, gaps
    assert {(done, total) for _, done, total, _ in seen} == {(1, 2)}  # agents done out of the group
    assert seen[0][3] == "1 of 2 agents reached idle; waiting (0 s of 1 s)"
    assert emulator.backend.requests["GET /api/v2/workspaces"] <= 2  # progress costs Coder nothing


async def test_progress_of_one_agent_says_agent(tools, emulator):
    await make(tools, emulator, ("alone", "Forever [[hang]]"))
    said: list[str | None] = []

    async def progress(done, total, message):
        said.append(message)

    # Long enough that a loaded machine's first listing leaves time for a word before the timeout.
    await tools("wait_for_agents", progress=progress, agent_names=["alone"], timeout_s=1.0)
    assert said and (said[0] or "").startswith("0 of 1 agent reached idle; waiting")


async def test_the_cap_of_one_agent_says_agent(emulator, conformance):
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(max_agents=1), transport=transport)) as client:
        tools = Tools(client)
        await tools("create_agent", name="only", project="fleet-demo", spec="Work")
        refused = await tools.error("create_agent", name="second", project="fleet-demo", spec="Work")
    assert refused["message"].startswith("The fleet has 1 agent, its cap (FLEET_MCP_MAX_AGENTS=1).")


async def statuses(tools: Tools, name: str) -> set[str]:
    """What every tool that describes one agent says of it, in one moment (the virtual clock stands still)."""
    listed = next(a["status"] for a in (await tools("list_agents"))["agents"] if a["name"] == name)
    shown = (await tools("show_agent", agent_name=name))["agent"]["status"]
    glanced = (await tools("show_agents", agent_names=[name]))["agents"][0]["status"]
    waited = (await tools("wait_for_agents", agent_names=[name], timeout_s=0))["agents"][0]["status"]
    return {listed, shown, glanced, waited}


async def test_one_status_per_moment_from_create_to_stop_and_start(tools, emulator):
    made = (await tools("create_agent", name="moment", project="fleet-demo", spec="Work [[finish:1]]"))["agent"]
    assert (made["status"], made["status_source"], made["workspace_status"]) == ("busy", "build", "pending")
    assert await statuses(tools, "moment") == {"busy"}  # as the README's diagram says: busy on its spec at once
    emulator.advance(30)
    assert await statuses(tools, "moment") == {"idle"}
    stopping = (await tools("stop_agent", agent_name="moment"))["agent"]
    assert (stopping["status"], stopping["workspace_status"]) == ("stopping", "pending")  # queued: asked to stop
    assert await statuses(tools, "moment") == {"stopping"}
    emulator.advance(30)
    assert await statuses(tools, "moment") == {"stopped"}
    starting = (await tools("start_agent", agent_name="moment"))["agent"]
    assert starting["status"] == "starting"
    assert await statuses(tools, "moment") == {"starting"}


@pytest.mark.parametrize(("tool", "arguments", "message"), [
    ("wait_for_agents", {"agent_names": ["x"], "until": "asleep"},
     "Invalid argument: until should be 'idle', 'needs_input', 'stopped' or 'failed', or a list."),
    ("wait_for_agents", {"agent_names": ["x"], "until": ["idle", 3]},
     "Invalid argument: until[1] should be 'idle', 'needs_input', 'stopped' or 'failed'."),
    ("wait_for_agents", {"agent_names": "x"}, "Invalid argument: agent_names should be a list."),
    ("show_agent_task_history", {"agent_name": "x", "page": "two"}, "Invalid argument: page should be a whole number."),
    ("create_agent", {"name": "x", "project": "p"}, "Invalid argument: spec is missing."),
    ("show_agent", {"agent_name": "x", "extra": 1}, "Invalid argument: extra is not a parameter of this tool."),
    ("create_agent", {"name": "x", "project": "p", "spec": "s", "max_turns": "many", "role": 7},
     "Invalid arguments: role should be text; max_turns should be a whole number."),
], ids=["union", "list-item", "list", "integer", "missing", "unexpected", "two"])
async def test_refused_arguments_are_named_as_the_caller_wrote_them(tools, tool, arguments, message):
    refused = await tools.error(tool, **arguments)
    assert refused["error"] == "bad_request" and refused["message"] == message
    fields = [p["field"] for p in refused["details"]["problems"]]
    assert fields and not any("literal" in f or "list[" in f for f in fields), fields
