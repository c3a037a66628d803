"""Helpers the tests share: tokens, clients to the emulator, the fleet's tools through MCP.

Plain functions and classes (fixtures live in conftest.py), importable as
`from tests.support import ...` from any test module.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from fleet_mcp.emulator import Emulator
from tests.conformance import Conformance

if TYPE_CHECKING:  # fastmcp and mcp cost half a second to import: only the tests that use them pay it
    from fastmcp import Client
    from fastmcp.client.progress import ProgressHandler
    from fastmcp.client.transports import StreamableHttpTransport
    from mcp_types import ContentBlock

    from fleet_mcp.settings import Settings

TOKEN = "demo-token"
ALICE_TOKEN = "demo-token-alice"
TOOLS = {"create_agent", "list_agents", "show_agent", "show_agent_task_history", "delete_agent", "start_agent_task",
         "cancel_agent_task", "list_agent_roles", "list_agent_projects", "show_agent_log", "wait_for_agents",
         "show_agents", "answer_agent", "get_agent_result", "stop_agent", "start_agent", "show_agent_diff"}


@dataclass
class Spawns:
    count: int = 0


SPAWNS = Spawns()


def count_spawns() -> None:
    """Count every process started from here on (`subprocess.Popen`, which asyncio's subprocesses use too)."""
    original = subprocess.Popen.__init__
    if getattr(original, "counted", False):
        return

    @functools.wraps(original)
    def counted(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:  # Popen's own arguments
        SPAWNS.count += 1
        original(self, *args, **kwargs)

    counted.counted = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = counted  # type: ignore[method-assign]


def check_each_schema_once() -> None:
    """The MCP client checks a tool's output schema against JSON Schema's metaschema in every session, before
    its first call of that tool (12-40 ms a tool, more than the call); whether a schema is valid is the
    schema's own property, so here it is checked once per distinct schema in a process (a failure each time)."""
    from jsonschema.validators import Draft202012Validator

    check = Draft202012Validator.check_schema
    if getattr(check, "once", False):
        return
    valid: set[str] = set()

    def check_schema(cls: object, schema: object, *args: Any, **kwargs: Any) -> None:  # jsonschema's own
        key = json.dumps(schema, sort_keys=True, default=repr)
        if key not in valid:
            check(schema, *args, **kwargs)
            valid.add(key)

    check_schema.once = True  # type: ignore[attr-defined]
    Draft202012Validator.check_schema = classmethod(check_schema)


APP_HOST = "apps.example.test"  # the emulator's wildcard app host is `*.` this


def subdomain_apps_only(emulator: Emulator) -> None:
    """The emulator as a Coder run with `--wildcard-access-url '*.apps.example.test' --disable-path-apps`."""
    emulator.backend.wildcard_hostname = f"*.{APP_HOST}"
    emulator.backend.disable_path_apps = True


@contextmanager
def emulator_thread(token: str = TOKEN) -> Iterator[Emulator]:
    """An emulator on real time (as `fleet-mcp emulator` runs it), served on a loopback port (its `url`) from a thread of this process: the Coder
    of servers under test where the emulator's own process is not what a test is about (it saves that
    process's start-up, a second of CPU)."""
    from fleet_mcp.emulator import REAL_TIME
    from fleet_mcp.emulator.app import in_background

    emulator = Emulator(token=token, virtual=False, timings=REAL_TIME)
    close = in_background(emulator)
    try:
        yield emulator
    finally:
        close()


def client_for(emulator: Emulator, conformance: Conformance, token: str | None = TOKEN) -> httpx.AsyncClient:
    """An httpx client talking to the emulator in-process; every JSON answer is checked."""
    headers = {"Coder-Session-Token": token} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                             headers=headers, event_hooks={"response": [conformance.hook]})


async def template_named(coder: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await coder.get("/api/v2/organizations/coder/templates/" + name)
    assert r.status_code == 200, r.text
    template: dict[str, Any] = r.json()
    return template


async def create_workspace(coder: httpx.AsyncClient, name: str, template: str = "fleet-demo",
                           params: dict[str, str] | None = None, **extra: object) -> httpx.Response:
    t = await template_named(coder, template)
    body = {"name": name, "template_id": t["id"],
            "rich_parameter_values": [{"name": k, "value": v} for k, v in (params or {}).items()], **extra}
    return await coder.post("/api/v2/users/me/workspaces", json=body)


async def runner_agent(coder: httpx.AsyncClient, emulator: Emulator, name: str) -> str:
    """A fleet workspace, up, whose agent offers the runner's app (`fleet`) with nothing behind it (a test's
    fault rules stand in for the runner); its workspace agent's token."""
    if (await coder.get("/api/v2/organizations/coder/templates/runner-agents")).status_code == 404:
        assert (await coder.post("/emulator/templates", json={"name": "runner-agents", "apps": ["fleet"]})
                ).status_code == 201
    made = await create_workspace(coder, name, template="runner-agents",
                                  params={"fleet_mcp_managed": "true", "fleet_mcp_agent_spec": "Work."})
    assert made.status_code == 201, made.text
    emulator.advance(30)
    token: str = (await coder.get(f"/emulator/agents/{name}/token")).json()["token"]
    return token


def asgi_request(method: str, path: str, body: dict[str, Any] | None = None, query: str = "",
                 path_params: dict[str, str] | None = None) -> Request:
    """A Starlette request as a route handler is given it, for calling one handler alone (no app, no server)."""
    raw = json.dumps(body).encode() if body is not None else b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": method, "path": path, "query_string": query.encode(),
             "headers": [(b"content-length", str(len(raw)).encode())], "path_params": path_params or {}}
    return Request(scope, receive)


def first_text(content: Sequence[ContentBlock]) -> str:
    """The text of a tool answer's first block: the JSON error envelope of a failed call."""
    from mcp_types import TextContent

    block = content[0]
    if not isinstance(block, TextContent):
        raise TypeError(f"the answer's first block is {block.type}, not text")
    return block.text


def dumps(value: object) -> str:
    return json.dumps(value, indent=1)[:2000]


# --- the fleet server, in memory, over the emulator ---------------------------

def fleet_settings(**overrides: Any) -> Settings:
    from fleet_mcp.settings import Settings

    values = {"coder_url": "http://coder.test", "coder_session_token": TOKEN, "retry_budget_s": 2.0,
              "poll_interval_s": 0.01, "cancel_wait_s": 2.0, "delete_wait_s": 2.0,
              "agent_error_wait_s": 0.2, "wait_poll_interval_s": 0.01, "progress_interval_s": 0.05, "create_adopt_wait_s": 0.5,
              **overrides}
    return Settings(**values)


class Tools:
    """Calls the fleet's tools through a real MCP client; answers structured content or the error envelope."""

    def __init__(self, client: Client[Any]) -> None:
        self.client = client

    async def __call__(self, tool: str, *, progress: ProgressHandler | None = None,
                       **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments, raise_on_error=False, progress_handler=progress)
        if result.is_error:
            envelope: dict[str, Any] = json.loads(first_text(result.content))
            return envelope
        assert result.structured_content is not None, result  # every tool has an output schema
        return result.structured_content

    async def error(self, tool: str, **arguments: Any) -> dict[str, Any]:
        answer = await self(tool, **arguments)
        assert set(answer) == {"error", "message", "details"}, answer
        return answer


class CheckedTransport(httpx.AsyncBaseTransport):
    """The fleet's own traffic to the emulator goes through the conformance check too."""

    def __init__(self, inner: httpx.AsyncBaseTransport, conformance: Conformance) -> None:
        self.inner = inner
        self.conformance = conformance

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        response.request = request
        await self.conformance.hook(response)
        return response


def http_tools(url: str, token: str) -> Client[StreamableHttpTransport]:
    """A fastmcp client of an HTTP server sending `Authorization: Bearer <token>` (use `async with`)."""
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport

    return Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}))


# --- an agent that replaced its app's server (specs/coder-apps.md) -----------

APP_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
RELAY_DROPS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer"}
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
        self.app = Starlette(routes=[Route("/{owner}/{workspace}/{slug}/{rest:path}", self.relay, methods=APP_METHODS)])

    async def relay(self, request: Request) -> StreamingResponse:
        rest = request.url.path.split("/", 4)[4]
        url = "/" + rest + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        self.seen.append(Seen(request.path_params["slug"], request.method, url, headers))
        inner = await self.coder.send(self.coder.build_request(
            request.method, "/emulator/apps" + request.url.path, params=request.query_params,
            headers=[(k, v) for k, v in headers if k.lower() not in RELAY_DROPS], content=await request.body()),
            stream=True)
        kept = {k: v for k, v in inner.headers.items() if k.lower() not in RELAY_DROPS}
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


@asynccontextmanager
async def impostor_on(coder: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None = None
                      ) -> AsyncIterator[Impostor]:
    """An impostor on a loopback port, set as every app's listener on the emulator `coder` talks to; it relays
    through `transport` (the in-process emulator) or to `coder`'s URL."""
    from fleet_mcp.emulator.app import running

    async with httpx.AsyncClient(transport=transport, base_url=coder.base_url, timeout=60) as relay:
        impostor = Impostor(relay)
        async with running(SimpleNamespace(app=impostor.app)) as url:  # type: ignore[arg-type]
            assert (await coder.post("/emulator/app-listener", json={"url": url})).json()["url"] == url
            yield impostor
