"""The control API under /emulator/: reset, seed, clock, request counts, rate limit.

Unauthenticated on purpose: it is for tests, demos and benchmarks on loopback.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .agentapi.claude import ClaudeCode
from .agentapi.session import Script
from .coder import seed
from .coder.backend import Backend
from .coder.proxy import AppProxy
from .coder.state import ParameterSpec
from .faults import Faults, fault_routes
from .runners.runtime import Runners

__all__ = ["AgentControl", "Control", "ControlAPI", "agent_routes", "control_routes"]

SCHEDULE_FIELDS = {"default_ttl_ms": int, "activity_bump_ms": int, "allow_user_autostop": bool,
                   "max_deadline_ms": int}


class Control:
    """Control operations; `token` is the demo user's session token."""

    def __init__(self, backend: Backend, token: str, runtime: str = "agentapi") -> None:
        self.backend = backend
        self.token = token
        self.runtime = runtime
        self.faults = Faults(headers={"X-Coder-Build-Version": backend.version})

    def reset(self, seed_name: str = "demo") -> None:
        if seed_name in ("demo", "fleet"):
            seed.seed_demo(self.backend, self.token, runtime=self.runtime, workspaces=seed_name == "demo")
        elif seed_name == "empty":
            seed.seed_empty(self.backend, self.token)
        else:
            raise ValueError(f"unknown seed {seed_name!r}: use 'demo', 'fleet' or 'empty'")
        self.backend.requests.clear()
        self.faults.clear()


async def _body(request: Request) -> dict:
    raw = await request.body()
    data = json.loads(raw or b"{}")
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


Handler = Callable[[Request], Awaitable[Response]]
WorkspaceHandler = Callable[[Request, Any], Awaitable[Response]]


class ControlAPI:
    """The control API's actions under /emulator/, one method each (the table is `control_routes`)."""

    def __init__(self, control: Control, proxy: AppProxy) -> None:
        self.control = control
        self.proxy = proxy
        self.b = control.backend

    async def reset(self, request: Request) -> Response:
        self.control.reset((await _body(request)).get("seed", "demo"))
        self.proxy.listener = ""  # the apps' own servers again
        return JSONResponse({"ok": True, "now": self.b.now().isoformat()})

    async def clock(self, request: Request) -> Response:
        b = self.b
        if request.method == "POST":
            data = await _body(request)
            b.clock.advance(float(data.get("seconds", 0)))
            if "per_request" in data:
                b.time_per_request = max(0.0, float(data["per_request"]))
        b.settle()
        return JSONResponse({"now": b.now().isoformat(), "elapsed": b.clock.elapsed(), "virtual": b.clock.virtual,
                             "per_request": b.time_per_request})

    async def requests(self, request: Request) -> Response:
        b = self.b
        if request.method == "DELETE":
            b.requests.clear()
        return JSONResponse({"total": sum(b.requests.values()), "routes": dict(b.requests)})

    async def rate_limit(self, request: Request) -> Response:
        self.b.rate_limit = bool((await _body(request)).get("enabled", True))
        return JSONResponse({"enabled": self.b.rate_limit})

    async def timings(self, request: Request) -> Response:
        """Read or change how long each lifecycle step takes (seconds), e.g. {"start_build": 5}."""
        b = self.b
        if request.method == "POST":
            for name, seconds in (await _body(request)).items():
                if name not in b.timings.__dataclass_fields__ or float(seconds) < 0:
                    raise ValueError(f"unknown timing {name!r} or negative seconds")
                setattr(b.timings, name, float(seconds))
        return JSONResponse(dataclasses.asdict(b.timings))

    async def bulk(self, request: Request) -> Response:
        data = await _body(request)
        names = seed.bulk_fleet(self.b, int(data.get("count", 10)), template=data.get("template", "fleet-demo"),
                                prefix=data.get("prefix", "bench"))
        return JSONResponse({"created": len(names), "names": names})

    async def template(self, request: Request) -> Response:
        """Add a template: {name, display_name, parameters: [names or specs], presets, apps, subdomain_apps, ...,
        default_ttl_ms, activity_bump_ms, allow_user_autostop, max_deadline_ms}."""
        b, runtime = self.b, self.control.runtime
        data = await _body(request)
        for name, kind in SCHEDULE_FIELDS.items():
            if name in data and (type(data[name]) is not kind or (kind is int and data[name] < 0)):
                raise ValueError(f"{name} must be a{' non-negative integer' if kind is int else ' boolean'}")
        owner = next(u for u in b.users.values() if "owner" in u.roles)
        fleet = {p.name: p for p in seed.fleet_parameters(runner=runtime == "runner")}
        params = [fleet[p] if isinstance(p, str) and p in fleet else
                  ParameterSpec(p) if isinstance(p, str) else ParameterSpec(**p)
                  for p in data.get("parameters", list(fleet))]
        t = seed.add_template(b, data["name"], data.get("display_name", data["name"]), owner=owner,
                              parameters=params, presets=data.get("presets"),
                              apps=data.get("apps", [seed.fleet_app(runtime)]),
                              subdomain_apps=data.get("subdomain_apps", []),
                              description=data.get("description", ""),
                              allow_cancel=data.get("allow_user_cancel_workspace_jobs", True),
                              build_error=data.get("build_error", ""),
                              startup_error=data.get("startup_error", False),
                              schedule={k: data[k] for k in SCHEDULE_FIELDS if k in data})
        return JSONResponse({"id": t.id, "active_version_id": t.active_version_id}, 201)

    async def app_proxy(self, request: Request) -> Response:
        """Coder's app settings: {wildcard_hostname ("*.apps.example.test" or ""), disable_path_apps}."""
        b = self.b
        data = await _body(request) if request.method == "POST" else {}
        if "wildcard_hostname" in data:
            b.wildcard_hostname = str(data["wildcard_hostname"] or "")
        if "disable_path_apps" in data:
            b.disable_path_apps = bool(data["disable_path_apps"])
        return JSONResponse({"wildcard_hostname": b.wildcard_hostname, "disable_path_apps": b.disable_path_apps})

    async def app_listener(self, request: Request) -> Response:
        """{url}: what listens on every app's port instead of its server (an agent that stopped the server and
        bound the port), each app at `{url}/{owner}/{workspace}/{slug}/`; "" or null: the apps' own servers.
        It gets what Coder's proxy passes on; the server itself stays at /emulator/apps/{owner}/{workspace}/{slug}/."""
        data = await _body(request) if request.method == "POST" else {}
        if "url" in data:
            url = str(data["url"] or "")
            if url and not url.startswith(("http://", "https://")):
                raise ValueError("url must be an http(s) URL, or empty")
            self.proxy.listener = url
        return JSONResponse({"url": self.proxy.listener or None})

    async def answers(self, request: Request) -> Response:
        """What workspace answers carry: {app_statuses: false} leaves `latest_app_status` and every app's
        `statuses` out, as a slimmer Coder (an `include_related`-style answer) might."""
        data = await _body(request)
        if "app_statuses" in data:
            self.b.app_statuses_in_answers = bool(data["app_statuses"])
        return JSONResponse({"app_statuses": self.b.app_statuses_in_answers})


def _guarded(handler: Handler) -> Handler:
    """`handler`, answering 400 with the reason when the request asks for what cannot be done."""
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, 400)
    return route


def control_routes(control: Control, proxy: AppProxy) -> list[Route]:
    """The control API's route table (and the faults' routes, `faults.fault_routes`)."""
    api = ControlAPI(control, proxy)
    table: list[tuple[str, list[str], Handler]] = [
        ("/emulator/reset", ["POST"], api.reset),
        ("/emulator/clock", ["GET", "POST"], api.clock),
        ("/emulator/requests", ["GET", "DELETE"], api.requests),
        ("/emulator/rate-limit", ["POST"], api.rate_limit),
        ("/emulator/timings", ["GET", "POST"], api.timings),
        ("/emulator/fleet", ["POST"], api.bulk),
        ("/emulator/templates", ["POST"], api.template),
        ("/emulator/app-proxy", ["GET", "POST"], api.app_proxy),
        ("/emulator/answers", ["POST"], api.answers),
        ("/emulator/app-listener", ["GET", "POST"], api.app_listener),
    ]
    return [Route(path, _guarded(handler), methods=methods) for path, methods, handler in table] + fault_routes(
        control.faults, control.token)


class AgentControl:
    """`/emulator/agents/{workspace}/...` actions on one workspace's agent, one method each (table: `agent_routes`)."""

    def __init__(self, backend: Backend, claude: ClaudeCode, runners: Runners | None = None) -> None:
        self.backend = backend
        self.claude = claude
        self.runners = runners

    async def script(self, request: Request, ws: Any) -> Response:
        """{script: "[[pr]] [[finish:2]]"} or {finish, pr, fail, hang, permission, acp}; {transport}."""
        data = await _body(request)
        fields = {k: data[k] for k in ("finish", "pr", "fail", "hang", "permission", "acp") if k in data}
        chosen = Script.parse(data["script"]) if data.get("script") else Script(**fields) if fields else None
        transport = data.get("transport")
        if transport not in (None, "pty", "acp"):
            raise ValueError("transport must be 'pty' or 'acp'")
        s = self.claude.set_script(ws, chosen, transport)
        return JSONResponse({"script": vars(chosen) if chosen else None, "transport": s.transport})

    async def error(self, request: Request, ws: Any) -> Response:
        """{message, level: error|warning}: an AgentAPI `agent_error` event."""
        data = await _body(request)
        level = data.get("level", "error")
        if level not in ("error", "warning") or not isinstance(data.get("message"), str):
            raise ValueError("expected {message: str, level: 'error'|'warning'}")
        self.claude.inject_error(ws, data["message"], level)
        return JSONResponse({"ok": True})

    async def process(self, request: Request, ws: Any) -> Response:
        """{running: false} stops AgentAPI and Claude Code (the proxy answers 502); true starts them."""
        s = self.claude.set_process(ws, bool((await _body(request)).get("running", True)))
        return JSONResponse({"running": s.up})

    async def token(self, request: Request, ws: Any) -> Response:
        """The workspace agent's token (CODER_AGENT_TOKEN), as a process inside the workspace gets it."""
        agents = ws.latest_build.agents
        if not agents:
            return JSONResponse({"error": f"workspace {ws.name} has no agent (not started)"}, 409)
        return JSONResponse({"agent_id": agents[0].id, "agent_name": agents[0].name, "token": agents[0].auth_token})

    async def runner(self, request: Request, ws: Any) -> Response:
        """The workspace's runner process (runner runtime): its URL, pid, scratch directory."""
        runners = self.runners
        if runners is None:
            return JSONResponse({"error": "the emulator runs agent_runtime 'agentapi': no runner processes"}, 409)
        found = runners.procs.get(ws.id)
        disk = runners.directory(ws)
        return JSONResponse({"running": bool(runners.url_of(ws)), "url": runners.url_of(ws) or None,
                             "pid": found.proc.pid if found else None, "directory": str(disk) if disk else None})

    def on_workspace(self, handler: WorkspaceHandler) -> Handler:
        """`handler` given the workspace the path names (owner `demo` unless `?owner=`): 404 when there is none,
        400 with the reason when the request asks for what cannot be done."""
        backend = self.backend

        async def route(request: Request) -> Response:
            backend.settle()
            owner = request.query_params.get("owner", "demo")
            name = request.path_params["workspace"]
            ws = next((w for w in backend.workspaces.values() if not w.deleted and w.name == name
                       and backend.users[w.owner_id].username == owner), None)
            if ws is None:
                return JSONResponse({"error": f"no workspace {owner}/{name}"}, 404)
            try:
                return await handler(request, ws)
            except (ValueError, KeyError, TypeError) as exc:
                return JSONResponse({"error": str(exc)}, 400)
        return route


def agent_routes(backend: Backend, claude: ClaudeCode, runners: Runners | None = None) -> list[Route]:
    """The route table of `/emulator/agents/{workspace}/...`: script, error, process, token, runner."""
    api = AgentControl(backend, claude, runners)
    table: list[tuple[str, str, WorkspaceHandler]] = [
        ("script", "POST", api.script), ("error", "POST", api.error), ("process", "POST", api.process),
        ("token", "GET", api.token), ("runner", "GET", api.runner),
    ]
    return [Route(f"/emulator/agents/{{workspace}}/{name}", api.on_workspace(handler), methods=[method])
            for name, method, handler in table]
