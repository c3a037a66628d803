"""Each tool answers within its own deadline, retries and inner waits included, whatever Coder does.

Small settings scale every deadline down; Coder is either gone (nothing listens) or stalling (it accepts
and never answers). The worst case measured for each tool is printed for the record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastmcp import Client

from fleet_mcp import deadlines
from fleet_mcp import tools as tool_functions
from fleet_mcp.coder import errors as ce
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.server import build_server
from fleet_mcp.serving.services import Services
from fleet_mcp.settings import Settings
from tests.processes import free_port
from tests.support import CheckedTransport, Tools, fleet_settings

SMALL = {"request_timeout_s": 0.4, "connect_timeout_s": 0.2, "retry_budget_s": 0.6, "cancel_wait_s": 0.5,
         "delete_wait_s": 0.5, "create_adopt_wait_s": 0.4, "poll_interval_s": 0.05, "wait_poll_interval_s": 0.1}
CALLS = [
    ("list_agent_projects", {}, deadlines.deadline_of_a_read),
    ("list_agent_roles", {"project": "fleet-demo"}, deadlines.deadline_of_a_read),
    ("create_agent", {"name": "late", "project": "fleet-demo", "spec": "Go"}, deadlines.create),
    ("list_agents", {}, deadlines.deadline_of_a_read),
    ("show_agent", {"agent_name": "late"}, deadlines.deadline_of_a_read),
    ("show_agents", {"agent_names": ["late"]}, deadlines.deadline_of_a_read),
    ("show_agent_task_history", {"agent_name": "late"}, deadlines.deadline_of_a_read),
    ("show_agent_log", {"agent_name": "late"}, deadlines.deadline_of_a_read),
    ("get_agent_result", {"agent_name": "late"}, deadlines.deadline_of_a_read),
    ("start_agent_task", {"agent_name": "late", "task_description": "More"}, deadlines.send),
    ("answer_agent", {"agent_name": "late", "prompt_id": "p-late", "decision": "allow"}, deadlines.send),
    ("cancel_agent_task", {"agent_name": "late"}, deadlines.cancel),
    ("wait_for_agents", {"agent_names": ["late"], "timeout_s": 1}, deadlines.wait),
    ("stop_agent", {"agent_name": "late"}, deadlines.build),
    ("start_agent", {"agent_name": "late"}, deadlines.build),
    ("delete_agent", {"agent_name": "late"}, deadlines.build),
]


async def worst_cases(url: str) -> dict[str, tuple[float, float, str]]:
    """Every tool called at once (each is timed on its own; none waits on another)."""
    settings = fleet_settings(coder_url=url, **SMALL)
    async with Client(build_server(settings)) as client:
        tools = Tools(client)

        async def timed(name: str, arguments: Any, deadline: Callable[[Settings, dict[str, Any]], float]
                        ) -> tuple[float, float, str]:
            started = time.monotonic()
            answer = await tools(name, **arguments)
            return time.monotonic() - started, deadline(settings, arguments), answer.get("error", "ok")

        found = await asyncio.gather(*(timed(*call) for call in CALLS))
    return {name: f for (name, _, _), f in zip(CALLS, found, strict=True)}


def check(found: dict[str, tuple[float, float, str]], what: str) -> None:
    print(f"\nworst case with Coder {what} (s): " + ", ".join(f"{k} {v[0]:.2f}/{v[1]:.1f}" for k, v in found.items()))
    for name, (took, deadline, error) in found.items():
        assert took <= deadline + 0.5, f"{name} took {took:.2f} s against its {deadline:.1f} s deadline"
        assert error in ("unavailable", "not_found"), f"{name} answered {error}"


async def test_every_tool_answers_in_time_with_coder_gone():
    check(await worst_cases(f"http://127.0.0.1:{free_port()}"), "gone")


@pytest.mark.slow
async def test_every_tool_answers_in_time_with_coder_stalling():
    emulator = Emulator()
    async with running(emulator) as url:
        emulator.control.faults.add({"match": "* /*", "kind": "stall", "seconds": 600})
        check(await worst_cases(url), "stalling")


STATUS_ROUTE = "GET /@*/apps/ccw/status"  # the agent's status, through Coder's app proxy


async def test_cancel_answers_within_its_wait_with_the_agent_status_stalling(emulator, conformance, capsys):
    """Issue 22 item 5: the agent's status route stalls (past the 30 s request timeout); cancel answers within
    FLEET_MCP_CANCEL_WAIT_S + 5 s and says whether the interrupt was delivered."""
    wait = 0.5  # request_timeout_s keeps its 30 s
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(cancel_wait_s=wait), transport=transport)) as client:
        await _cancel_with_status_stalling(Tools(client), emulator, wait, capsys)


async def _cancel_with_status_stalling(tools: Tools, emulator: Emulator, wait: float, capsys: pytest.CaptureFixture[str]) -> None:
    await tools("create_agent", name="stuck", project="fleet-demo", spec="Forever [[hang]]")
    emulator.advance(30)
    faults = emulator.control.faults
    took = {}
    for case, passed in (("stalled from the start", 0), ("stalled after the interrupt", 2)):
        faults.clear()
        if passed:  # ready's look and the interrupt's own look pass; every later one stalls
            faults.add({"match": STATUS_ROUTE, "kind": "latency", "seconds": 0, "count": passed})
        faults.add({"match": STATUS_ROUTE, "kind": "stall", "seconds": 600})
        started = time.monotonic()
        answer = await tools("cancel_agent_task", agent_name="stuck")
        took[case] = time.monotonic() - started
        assert took[case] <= wait + 5, (case, took[case])
        if passed:
            assert answer["agent_status"] == "busy" and answer["message"].startswith("Interrupt delivered"), answer
        else:
            assert answer["error"] == "unavailable" and answer["details"] == {"interrupt_delivered": False}, answer
            assert "no interrupt was sent" in answer["message"]
    faults.clear()
    emulator.advance(5)
    assert (await tools("show_agent", agent_name="stuck"))["agent"]["status"] == "idle"  # the delivered ESC took
    with capsys.disabled():
        print(f"\ncancel with the agent's status stalling, cancel wait {wait:g} s: "
              + ", ".join(f"{k}: answered in {v:.2f} s" for k, v in took.items()))


async def test_the_deadline_a_call_is_given_ends_its_reads_retries(emulator, conformance, monkeypatch):
    """Issue 21 item 6: the deadline is an argument, not a context variable. Coder's listing fails with 502
    again and again, and the retry budget is 20 s. A tool function run alone (no server around it to cut it)
    with a deadline half a second away gives up there, with Coder's own error; through the server, the tool
    answers `unavailable` by its deadline."""
    rule = emulator.control.faults.add({"match": "GET /api/v2/workspaces", "kind": "status", "code": 502})
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    loop = asyncio.get_running_loop()
    services = Services.open(fleet_settings(retry_budget_s=20.0), transport)
    async with services.client:
        started = loop.time()
        with pytest.raises(ce.ServerError):
            async with asyncio.timeout(5.0):  # what the retry budget alone would take: 20 s
                await tool_functions.list_agents(fleet=services.fleet, deadline=started + 0.5)
        took_alone = loop.time() - started
    assert 0.4 <= took_alone < 1.5, took_alone
    assert rule.fired >= 2  # retried until the deadline

    monkeypatch.setattr(deadlines, "MARGIN_S", 0.5)  # wait_for_agents' deadline: 0 s + 0.5 s + 0.5 s
    settings = fleet_settings(retry_budget_s=20.0, request_timeout_s=0.5)
    async with Client(build_server(settings, transport=transport)) as client:
        started = loop.time()
        answer = await Tools(client).error("wait_for_agents", agent_names=["any"], timeout_s=0)
        took = loop.time() - started
    assert answer["error"] == "unavailable", answer
    assert took < deadlines.wait(settings, {"timeout_s": 0}) + 0.5, took
