"""Each tool answers within its own deadline, retries and inner waits included, whatever Coder does.

Small settings scale every deadline down; Coder is either gone (nothing listens) or stalling (it accepts
and never answers). The worst case measured for each tool is printed for the record.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from fastmcp import Client
from processes import free_port
from support import Tools, fleet_settings

from fleet_mcp import deadlines
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.server import build_server

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

        async def timed(name: str, arguments: dict, deadline) -> tuple[float, float, str]:
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
