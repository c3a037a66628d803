"""The user's Coder token never reaches a workspace app (issue 29 item 1; specs/coder-apps.md).

Coder's app proxy hands whatever listens on an app's port every header, cookie and query parameter of the
request but Coder's own cookies. Here that listener is an impostor: an agent that stopped its app's server
(AgentAPI, or the runner), bound the port, keeps every request and relays it to the server, so every tool
still works. Every tool that reaches an agent is called, on path and subdomain apps, with the server's own
token and with each caller's (FLEET_MCP_AUTH=coder); the impostor must find the token nowhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import httpx
import pytest
from runners import WAIT_S, needs_sdk, runner_fleet
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from support import TOKEN, CheckedTransport, Tools, fleet_settings, http_tools, subdomain_apps_only

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
HOP_BY_HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer"}
# Coder's own cookies (httpapi.StripCoderCookies): the only credentials its proxy takes out.
CODER_COOKIES = ("coder_session_token", "oauth_state", "oauth_redirect", "coder_path_app_session_token",
                 "coder_signed_app_token", "coder_subdomain_app_session_token")


@dataclass
class Seen:
    """One request as the app's port got it."""

    slug: str
    method: str
    url: str  # path and query
    headers: list[tuple[str, str]]


class Impostor:
    """Listens where every app's server did, keeps what each request carried, relays it to the server (the
    emulator's `/emulator/apps/...`, as a process in the workspace reaches it) and streams its answer back."""

    def __init__(self, coder: httpx.AsyncClient) -> None:
        self.coder = coder
        self.seen: list[Seen] = []
        self.app = Starlette(routes=[Route("/{owner}/{workspace}/{slug}/{rest:path}", self.relay, methods=METHODS)])

    async def relay(self, request: Request) -> StreamingResponse:
        rest = request.url.path.split("/", 4)[4]
        url = "/" + rest + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        self.seen.append(Seen(request.path_params["slug"], request.method, url, headers))
        inner = await self.coder.send(self.coder.build_request(
            request.method, "/emulator/apps" + request.url.path, params=request.query_params,
            headers=[(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP], content=await request.body()),
            stream=True)
        kept = {k: v for k, v in inner.headers.items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(inner.aiter_raw(), inner.status_code, kept, background=BackgroundTask(inner.aclose))

    def leaks(self, token: str) -> list[str]:
        """Where the token, or a Coder cookie, reached the port."""
        found = []
        for seen in self.seen:
            where = f"{seen.method} {seen.url}"
            if token in seen.url:
                found.append(f"{where}: in the URL")
            for name, value in seen.headers:
                if token in value:
                    found.append(f"{where}: in {name}")
                if name.lower() == "cookie":
                    names = [part.partition("=")[0].strip() for part in value.split(";")]
                    found += [f"{where}: cookie {n}" for n in names if n.startswith(CODER_COOKIES)]
        return found


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
async def impostor_on(coder: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None = None
                      ) -> AsyncIterator[Impostor]:
    """An impostor on a loopback port, set as every app's listener on the emulator `coder` talks to; it relays
    through `transport` (the in-process emulator) or to `coder`'s URL."""
    async with httpx.AsyncClient(transport=transport, base_url=coder.base_url, timeout=60) as relay:
        impostor = Impostor(relay)
        async with running(SimpleNamespace(app=impostor.app)) as url:  # type: ignore[arg-type]
            assert (await coder.post("/emulator/app-listener", json={"url": url})).json()["url"] == url
            yield impostor


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


@pytest.mark.system
@needs_sdk
@pytest.mark.parametrize("app_mode", ["path", "subdomain"])
async def test_an_impostor_on_a_runner_port_never_sees_the_token_but_gets_the_runner_key(conformance, app_mode):
    wait = {"timeout_s": WAIT_S * 4}
    async with runner_fleet(conformance, app_mode) as (tools, coder), impostor_on(coder) as impostor:
        call = Story(tools, impostor)
        await call("create_agent", name="sdk-leak", project="fleet-demo", spec="Run it [[permission]]")
        asking = await call("wait_for_agents", agent_names=["sdk-leak"], until="needs_input", **wait)
        assert asking["met"] == ["sdk-leak"], asking
        prompt = (await call("show_agent", agent_name="sdk-leak"))["agent"]["pending"]["prompt_id"]
        await call("answer_agent", agent_name="sdk-leak", prompt_id=prompt, decision="allow")
        await call("wait_for_agents", agent_names=["sdk-leak"], **wait)
        await call("show_agents", agent_names=["sdk-leak"])
        await call("show_agent_log", agent_name="sdk-leak")
        await call("show_agent_task_history", agent_name="sdk-leak")
        await call("get_agent_result", agent_name="sdk-leak")
        await call("show_agent_diff", agent_name="sdk-leak")
        await call("start_agent_task", agent_name="sdk-leak", task_description="Long [[hang]]")
        await call("start_agent_task", agent_name="sdk-leak", task_description="Instead [[hang]]", if_busy="interrupt")
        await call("cancel_agent_task", agent_name="sdk-leak")
        await call("delete_agent", agent_name="sdk-leak")

    reaching = {"wait_for_agents", "show_agent", "answer_agent", "show_agents", "show_agent_log", "get_agent_result",
                "show_agent_diff", "start_agent_task", "cancel_agent_task"}
    assert {tool for tool, sent in call.reached.items() if sent} >= reaching, call.reached
    assert {s.slug for s in impostor.seen} == {"fleet"}
    assert impostor.leaks(TOKEN) == [], f"{len(impostor.leaks(TOKEN))} of {len(impostor.seen)} app requests"
    # The runner's own key is meant for it, and still reaches it through Coder's proxy, on every call.
    assert all(any(k.lower() == "x-fleet-runner-key" and v for k, v in s.headers) for s in impostor.seen)
