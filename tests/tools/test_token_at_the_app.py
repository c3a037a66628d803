"""The user's Coder token never reaches a workspace app (issue 29 item 1; specs/coder-apps.md).

Coder's app proxy hands whatever listens on an app's port every header, cookie and query parameter of the
request but Coder's own cookies. Here that listener is an impostor (`support.Impostor`): an agent that
stopped its app's server, bound the port, keeps every request and relays it to the server, so every tool
still works. Every tool that reaches an AgentAPI agent is called, on path and subdomain apps, with the
server's own token and with the caller's (FLEET_MCP_AUTH=coder); the impostor must find the token nowhere.
Runner agents likewise (their own tools too), on path apps with the server's token and on subdomain apps
with the caller's: the runner's key, meant for it, still reaches it on every call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator.app import running
from tests.runners import needs_sdk, runner_emulator
from tests.support import (
    APP_HOST,
    TOKEN,
    CheckedTransport,
    Impostor,
    Tools,
    fleet_settings,
    http_tools,
    impostor_on,
    subdomain_apps_only,
)


class Story:
    """Tool calls, each with the requests it sent to the agent's app."""

    def __init__(self, tools: Tools, impostor: Impostor) -> None:
        self.tools, self.impostor = tools, impostor
        self.reached: dict[str, int] = {}

    async def __call__(self, tool: str, **arguments: Any) -> dict[str, Any]:
        before = len(self.impostor.seen)
        answer = await self.tools(tool, **arguments)
        self.reached[tool] = self.reached.get(tool, 0) + len(self.impostor.seen) - before
        return answer

    def tools_reaching(self) -> set[str]:
        return {tool for tool, sent in self.reached.items() if sent}


@asynccontextmanager
async def fleet_tools(transport: httpx.AsyncBaseTransport, auth: str, **settings: Any) -> AsyncIterator[Tools]:
    """The fleet's tools on the Coder `transport` reaches: in memory with the server's token, or over HTTP (on
    loopback, in this process) with the caller's own token (FLEET_MCP_AUTH=coder)."""
    from fastmcp import Client

    from fleet_mcp.server import build_server
    from fleet_mcp.serving.http import Drain, build_app

    if auth == "token":
        async with Client(build_server(fleet_settings(**settings), transport=transport)) as client:
            yield Tools(client)
        return
    per_user = fleet_settings(auth="coder", coder_session_token=None, **settings)
    app = build_app(build_server(per_user, transport=transport), per_user, "127.0.0.1", Drain())
    async with running(SimpleNamespace(app=app)) as url, http_tools(f"{url}/mcp", TOKEN) as client:  # type: ignore[arg-type]
        yield Tools(client)


@pytest.mark.parametrize("auth", ["token", "coder"])
async def test_an_impostor_on_an_agentapi_port_never_sees_the_token(emulator, coder, conformance, app_mode, auth):
    if app_mode == "subdomain":
        subdomain_apps_only(emulator)
    await coder.post("/emulator/clock", json={"per_request": 0.1})  # waits see time move
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with impostor_on(coder, httpx.ASGITransport(app=emulator.app)) as impostor, \
            fleet_tools(transport, auth) as tools:
        call = Story(tools, impostor)
        await call("create_agent", name="leaky", project="fleet-demo", spec="Ask first [[permission]] [[finish:2]]")
        emulator.advance(30)
        asking = await call("wait_for_agents", agent_names=["leaky"], until="needs_input", timeout_s=30)
        assert asking["met"] == ["leaky"], asking
        shown = (await call("show_agent", agent_name="leaky"))["agent"]
        answered = await call("answer_agent", agent_name="leaky", prompt_id=shown["pending"]["prompt_id"],
                              digest=shown["pending"]["digest"], decision="allow")
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

    assert call.tools_reaching() >= {"show_agent", "answer_agent", "show_agents", "show_agent_log",
                                     "start_agent_task", "cancel_agent_task"}, call.reached
    assert {s.slug for s in impostor.seen} == {"ccw"}
    assert impostor.leaks(TOKEN) == [], f"{len(impostor.leaks(TOKEN))} of {len(impostor.seen)} app requests"


@pytest.mark.system
@needs_sdk
@pytest.mark.parametrize(("app_mode", "auth"), [("path", "token"), ("subdomain", "coder")])
async def test_an_impostor_on_a_runner_port_never_sees_the_token_but_gets_the_runner_key(conformance, app_mode, auth):
    emulator = runner_emulator()
    if app_mode == "subdomain":
        subdomain_apps_only(emulator)
    wait = {"timeout_s": 90}
    async with running(emulator) as url, httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": TOKEN},
                                                           timeout=30) as coder, impostor_on(coder) as impostor:
        port = httpx.URL(url).port
        settings = {"connect_to": f"*.{APP_HOST}=127.0.0.1:{port}"} if app_mode == "subdomain" else {}
        transport = CheckedTransport(httpx.AsyncHTTPTransport(), conformance)
        # Waits poll twice a second: the start takes most of a minute on a loaded machine, and faster polling
        # would spend the waits' share of Coder's rate limit (256 a minute) before the second wait.
        async with fleet_tools(transport, auth, coder_url=url, poll_interval_s=0.1, wait_poll_interval_s=0.5,
                               cancel_wait_s=20, delete_wait_s=30, **settings) as tools:
            call = Story(tools, impostor)
            await call("create_agent", name="sdk-leak", project="fleet-demo", spec="Run it [[permission]]")
            asking = await call("wait_for_agents", agent_names=["sdk-leak"], until="needs_input", **wait)
            assert asking["met"] == ["sdk-leak"], asking
            pending = (await call("show_agent", agent_name="sdk-leak"))["agent"]["pending"]
            prompt = pending["prompt_id"]
            assert (await call("answer_agent", agent_name="sdk-leak", prompt_id=prompt, digest=pending["digest"],
                               decision="allow"))["prompt_id"] == prompt
            waited = await call("wait_for_agents", agent_names=["sdk-leak"], **wait)
            assert waited["met"] == ["sdk-leak"], waited
            await call("show_agents", agent_names=["sdk-leak"])
            await call("show_agent_log", agent_name="sdk-leak")
            assert (await call("get_agent_result", agent_name="sdk-leak"))["outcome"] == "succeeded"
            assert (await call("show_agent_diff", agent_name="sdk-leak"))["files"]
            await call("start_agent_task", agent_name="sdk-leak", task_description="Long [[hang]]")
            await call("start_agent_task", agent_name="sdk-leak", task_description="Instead [[hang]]",
                       if_busy="interrupt")
            assert (await call("cancel_agent_task", agent_name="sdk-leak"))["agent_status"] == "idle"
            await call("delete_agent", agent_name="sdk-leak")

    assert call.tools_reaching() >= {"show_agent", "answer_agent", "show_agents", "show_agent_log", "get_agent_result",
                                     "show_agent_diff", "start_agent_task", "cancel_agent_task"}, call.reached
    assert {s.slug for s in impostor.seen} == {"fleet"}
    assert impostor.leaks(TOKEN) == [], f"{len(impostor.leaks(TOKEN))} of {len(impostor.seen)} app requests"
    # The runner's own key is meant for it, and reaches it through Coder's proxy on every call.
    assert all(any(k.lower() == "x-fleet-runner-key" and v for k, v in s.headers) for s in impostor.seen)
