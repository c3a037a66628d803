"""The user's Coder token never reaches a workspace app (issue 29 item 1; specs/coder-apps.md).

Coder's app proxy hands whatever listens on an app's port every header, cookie and query parameter of the
request but Coder's own cookies. Here that listener is an impostor (`support.Impostor`): an agent that
stopped its app's server, bound the port, keeps every request and relays it to the server, so every tool
still works. Every tool that reaches an AgentAPI agent is called, on path and subdomain apps, with the
server's own token and with the caller's (FLEET_MCP_AUTH=coder); the impostor must find the token nowhere.
Runner agents: the same impostor in `test_runner_agents.py`'s whole story.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace

import httpx
import pytest
from support import TOKEN, CheckedTransport, Impostor, Tools, fleet_settings, http_tools, impostor_on, subdomain_apps_only

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running

class Story:
    """Tool calls, each with the requests it sent to the agent's app."""

    def __init__(self, tools: Tools, impostor: Impostor) -> None:
        self.tools, self.impostor = tools, impostor
        self.reached: dict[str, int] = {}

    async def __call__(self, tool: str, **arguments) -> dict:
        before = len(self.impostor.seen)
        answer = await self.tools(tool, **arguments)
        self.reached[tool] = self.reached.get(tool, 0) + len(self.impostor.seen) - before
        return answer


@asynccontextmanager
async def fleet_tools(emulator: Emulator, conformance, auth: str) -> AsyncIterator[Tools]:
    """The fleet's tools on the in-process emulator: in-memory with the server's token, or over HTTP (on
    loopback, in this process) with the caller's own token (FLEET_MCP_AUTH=coder)."""
    from fastmcp import Client

    from fleet_mcp.server import build_server
    from fleet_mcp.serving.http import Drain, build_app

    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    if auth == "token":
        async with Client(build_server(fleet_settings(), transport=transport)) as client:
            yield Tools(client)
        return
    settings = fleet_settings(auth="coder", coder_session_token=None)
    app = build_app(build_server(settings, transport=transport), settings, "127.0.0.1", Drain())
    async with running(SimpleNamespace(app=app)) as url, http_tools(f"{url}/mcp", TOKEN) as client:  # type: ignore[arg-type]
        yield Tools(client)


@pytest.mark.parametrize("auth", ["token", "coder"])
async def test_an_impostor_on_an_agentapi_port_never_sees_the_token(emulator, coder, conformance, app_mode, auth):
    if app_mode == "subdomain":
        subdomain_apps_only(emulator)
    await coder.post("/emulator/clock", json={"per_request": 0.1})  # waits see time move
    async with impostor_on(coder, httpx.ASGITransport(app=emulator.app)) as impostor, fleet_tools(emulator, conformance, auth) as tools:
        call = Story(tools, impostor)
        await call("create_agent", name="leaky", project="fleet-demo", spec="Ask first [[permission]] [[finish:2]]")
        emulator.advance(30)
        asking = await call("wait_for_agents", agent_names=["leaky"], until="needs_input", timeout_s=30)
        assert asking["met"] == ["leaky"], asking
        shown = (await call("show_agent", agent_name="leaky"))["agent"]
        answered = await call("answer_agent", agent_name="leaky", prompt_id=shown["pending"]["prompt_id"],
                              decision="allow")
        assert answered["prompt_id"] == shown["pending"]["prompt_id"]
        emulator.advance(30)
        assert (await call("show_agents", agent_names=["leaky"]))["agents"][0]["status"] == "idle"
        await call("list_agents")
        await call("show_agent_log", agent_name="leaky")
        await call("show_agent_task_history", agent_name="leaky")
        await call("start_agent_task", agent_name="leaky", task_description="Spin [[hang]]")
        instead = await call("start_agent_task", agent_name="leaky", task_description="Instead [[hang]]",
                             if_busy="interrupt")
        assert instead["agent_status"] == "busy", instead
        assert (await call("cancel_agent_task", agent_name="leaky"))["agent_status"] == "idle"
        await call("delete_agent", agent_name="leaky")

    reaching = {"show_agent", "answer_agent", "show_agents", "show_agent_log", "start_agent_task", "cancel_agent_task"}
    assert {tool for tool, sent in call.reached.items() if sent} >= reaching, call.reached
    assert {s.slug for s in impostor.seen} == {"ccw"}
    assert impostor.leaks(TOKEN) == [], f"{len(impostor.leaks(TOKEN))} of {len(impostor.seen)} app requests"
