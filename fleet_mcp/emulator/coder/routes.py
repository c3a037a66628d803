"""Coder's REST routes: parse the request, call the backend, serialize the answer."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import appstatus, views
from .backend import Backend
from .errors import ErrorAnswer
from .state import User

__all__ = ["coder_routes", "endpoint", "error_response"]

Handler = Callable[[Request, Backend, Any], Awaitable[Response]]  # Any: User, or None without auth


def error_response(err: ErrorAnswer, backend: Backend) -> JSONResponse:
    return JSONResponse(err.body(), err.status, headers={**err.headers, **_version_header(backend)})


def _version_header(backend: Backend) -> dict[str, str]:
    return {"X-Coder-Build-Version": backend.version}


def token_of(request: Request) -> str | None:
    """`httpmw.APITokenFromRequest`, in its order: the `coder_session_token` cookie, then query parameter,
    the `Coder-Session-Token` header, a Bearer token, the `access_token` query parameter."""
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return (request.cookies.get("coder_session_token") or request.query_params.get("coder_session_token")
            or request.headers.get("coder-session-token") or bearer
            or request.query_params.get("access_token", "").strip() or None)


SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE"}
# httpmw.CSRF's exemptions (ExemptPath, ExemptRegexp: matched anywhere in the path).
CSRF_EXEMPT = re.compile(r"^/api/v2/csp/reports$|/api/v2/users/first|api/v2/workspaceagents|api/v2/workspaceproxies/me"
                         r"|derp|api/v2/scim|/organizations/[^/]+/provisionerdaemons")
CSRF_MISMATCH = ('CSRF error encountered. Authentication via "coder_session_token" cookie and "Coder-Session-Token" '
                 "header detected, but the values do not match. To resolve this issue ensure the values used in both "
                 "match, or only use one of the authentication methods. You can also try clearing your cookies if "
                 "this error persists.")
CSRF_FAILED = ("Something is wrong with your CSRF token. Please refresh the page. If this error persists, try "
               "clearing your cookies.")


def csrf_refusal(request: Request) -> Response | None:
    """`httpmw.CSRF` (coderd/httpmw/csrf.go, nosurf): a write under /api that carries the `coder_session_token`
    cookie is refused 400 unless the header or query token equals it, a Bearer or provisioner key comes with
    it, or the path is exempt (the emulator hands out no CSRF tokens, so `X-CSRF-Token` never passes)."""
    path, cookie = request.url.path, request.cookies.get("coder_session_token")
    if request.method in SAFE_METHODS or not path.startswith("/api") or not cookie or CSRF_EXEMPT.search(path):
        return None
    header = request.headers.get("coder-session-token", "")
    if cookie in (header, request.query_params.get("coder_session_token")) or any(
            request.headers.get(h) for h in ("coder-provisioner-daemon-psk", "coder-provisioner-daemon-key")
    ) or request.headers.get("authorization", "").lower().startswith("bearer "):
        return None
    answer = PlainTextResponse((CSRF_MISMATCH if header else CSRF_FAILED) + "\n", 400)
    answer.headers["X-Content-Type-Options"] = "nosniff"
    return answer


def endpoint(backend: Backend, method: str, path: str, handler: Handler, *, auth: bool = True) -> Route:
    """A route whose handler runs on a settled backend, authenticated, counted, rate limited."""
    key = f"{method} {path}"

    async def run(request: Request) -> Response:
        backend.on_request()
        backend.count(key)
        if (refused := csrf_refusal(request)) is not None:
            return refused
        try:
            user = None
            if auth:
                user = backend.authenticate(token_of(request))
                backend.check_rate(user, request.url.path)
            response = await handler(request, backend, user)
        except ErrorAnswer as err:
            return error_response(err, backend)
        response.headers.update(_version_header(backend))
        return response

    return Route(path, run, methods=[method])


async def read_any_json(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise ErrorAnswer(400, "Request body must be valid JSON.", str(exc)) from None


async def read_json(request: Request) -> dict:
    body = await read_any_json(request)
    if not isinstance(body, dict):
        raise ErrorAnswer(400, "Request body must be valid JSON.", "expected a JSON object")
    return body


def pagination(request: Request) -> tuple[int, int]:
    values, errors = [], []
    for name in ("limit", "offset"):
        raw = request.query_params.get(name, "")
        if raw == "":
            values.append(0)
            continue
        try:
            value = int(raw)
            if value < 0:
                raise ValueError
            values.append(value)
        except ValueError:
            errors.append({"field": name, "detail": f'Query param "{name}" must be a non-negative integer'})
    if errors:
        raise ErrorAnswer(400, "Query parameters have invalid values.", validations=errors)
    return values[0], values[1]


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("true", "1")


# --- handlers ---------------------------------------------------------------

async def buildinfo(request: Request, b: Backend, _: User | None) -> Response:
    base = str(request.base_url).rstrip("/")
    return JSONResponse({
        "external_url": "https://github.com/coder/coder", "version": b.version, "dashboard_url": base,
        "telemetry": False, "workspace_proxy": False, "agent_api_version": "2.6",
        "provisioner_api_version": "1.9", "upgrade_message": "", "deployment_id": b.deployment_id,
        "webpush_public_key": "",
    })


async def get_user(request: Request, b: Backend, actor: User) -> Response:
    return JSONResponse(views.user_json(b.user(actor, request.path_params["user"]), b))


async def organizations(request: Request, b: Backend, actor: User) -> Response:
    return JSONResponse([views.org_json(o) for o in b.orgs.values()])


async def organization(request: Request, b: Backend, actor: User) -> Response:
    return JSONResponse(views.org_json(b.organization(request.path_params["organization"])))


async def templates(request: Request, b: Backend, actor: User) -> Response:
    org = b.organization(request.path_params["organization"]) if "organization" in request.path_params else None
    found = b.list_templates(actor, request.query_params.get("q", ""), org)
    return JSONResponse([views.template_json(t, b) for t in found])


async def template_by_name(request: Request, b: Backend, actor: User) -> Response:
    p = request.path_params
    return JSONResponse(views.template_json(b.template_by_name(p["organization"], p["templatename"]), b))


async def template(request: Request, b: Backend, actor: User) -> Response:
    return JSONResponse(views.template_json(b.template(request.path_params["template"]), b))


async def version(request: Request, b: Backend, actor: User) -> Response:
    return JSONResponse(views.version_json(b.template_version(request.path_params["templateversion"]), b))


async def rich_parameters(request: Request, b: Backend, actor: User) -> Response:
    v = b.template_version(request.path_params["templateversion"])
    return JSONResponse([views.parameter_json(p) for p in v.parameters])


async def presets(request: Request, b: Backend, actor: User) -> Response:
    v = b.template_version(request.path_params["templateversion"])
    # Go marshals an empty slice that was never allocated as null, as real versions do.
    return JSONResponse([views.preset_json(p) for p in v.presets] or None)


async def version_resources(request: Request, b: Backend, actor: User) -> Response:
    v = b.template_version(request.path_params["templateversion"])
    return JSONResponse(views.version_resources_json(v, b))


async def regions(request: Request, b: Backend, actor: User) -> Response:
    base = str(request.base_url).rstrip("/")
    return JSONResponse({"regions": [{
        "id": b.deployment_id, "name": "primary", "display_name": "Default", "icon_url": "/emojis/1f3e1.png",
        "healthy": True, "path_app_url": base, "wildcard_hostname": b.wildcard_hostname,
    }]})


async def app_host(request: Request, b: Backend, actor: User) -> Response:
    # appurl.SubdomainAppHost: the access URL's port joins a wildcard that names none.
    host, port = b.wildcard_hostname, request.url.port
    if host and port and not re.search(r":\d+$", host):
        host += f":{port}"
    return JSONResponse({"host": host})


async def create_workspace(request: Request, b: Backend, actor: User) -> Response:
    p = request.path_params
    org = b.organization(p["organization"]) if "organization" in p else None
    ws = b.create_workspace(actor, p["user"], await read_json(request), org)
    return JSONResponse(views.workspace_json(ws, b), 201)


async def workspaces(request: Request, b: Backend, actor: User) -> Response:
    limit, offset = pagination(request)
    found, count = b.list_workspaces(actor, request.query_params.get("q", ""), limit, offset)
    return JSONResponse({"workspaces": [views.workspace_json(w, b) for w in found], "count": count})


async def workspace_by_name(request: Request, b: Backend, actor: User) -> Response:
    p = request.path_params
    ws = b.workspace_by_name(actor, p["user"], p["workspacename"], _flag(request, "include_deleted"))
    return JSONResponse(views.workspace_json(ws, b))


async def workspace(request: Request, b: Backend, actor: User) -> Response:
    ws = b.workspace(actor, request.path_params["workspace"], _flag(request, "include_deleted"))
    return JSONResponse(views.workspace_json(ws, b))


async def create_build(request: Request, b: Backend, actor: User) -> Response:
    build = b.create_build(actor, request.path_params["workspace"], await read_json(request))
    return JSONResponse(views.build_json(build, b.workspaces[build.workspace_id], b), 201)


async def builds(request: Request, b: Backend, actor: User) -> Response:
    limit, offset = pagination(request)
    found = b.list_builds(actor, request.path_params["workspace"])
    found = found[offset:offset + limit] if limit else found[offset:]
    return JSONResponse([views.build_json(x, b.workspaces[x.workspace_id], b) for x in found])


async def build(request: Request, b: Backend, actor: User) -> Response:
    ws, found = b.build(actor, request.path_params["workspacebuild"])
    return JSONResponse(views.build_json(found, ws, b))


async def build_parameters(request: Request, b: Backend, actor: User) -> Response:
    _, found = b.build(actor, request.path_params["workspacebuild"])
    return JSONResponse([{"name": n, "value": v} for n, v in found.parameters])


async def cancel_build(request: Request, b: Backend, actor: User) -> Response:
    b.cancel_build(actor, request.path_params["workspacebuild"], request.query_params.get("expect_status", ""))
    return JSONResponse({"message": "Job has been marked as canceled..."})


async def put_ttl(request: Request, b: Backend, actor: User) -> Response:
    b.set_ttl(actor, request.path_params["workspace"], await read_json(request))
    return Response(status_code=204)


async def patch_app_status(request: Request, b: Backend, _: User | None) -> Response:
    ws, agent = appstatus.authenticate_agent(b, token_of(request))
    appstatus.patch_app_status(b, ws, agent, await read_any_json(request))
    return JSONResponse(None)  # Coder writes `null` here


async def agent_rpc(request: Request, b: Backend, _: User | None) -> Response:
    """The emulator's stand-in for the Agent API a workspace agent holds open to coderd (dRPC over
    `/api/v2/workspaceagents/me/rpc`), which the agent socket forwards to: one JSON POST per RPC, with the
    agent's token. `Ping` and `UpdateAppStatus`, for the emulated `coder exp mcp server`."""
    ws, agent = appstatus.authenticate_agent(b, token_of(request))
    method = request.path_params["method"]
    if method == "UpdateAppStatus":
        appstatus.update_app_status(b, ws, agent, await read_any_json(request))
    elif method != "Ping":
        raise ErrorAnswer(404, f"Unknown RPC {method[:40]!r}.")
    return JSONResponse({})


def coder_routes(b: Backend) -> list[Route]:
    v2 = "/api/v2"
    table: list[tuple[str, str, Handler]] = [
        ("GET", "/users/{user}", get_user),
        ("GET", "/users/{user}/organizations", organizations),
        ("GET", "/organizations", organizations),
        ("GET", "/organizations/{organization}", organization),
        ("GET", "/templates", templates),
        ("GET", "/organizations/{organization}/templates", templates),
        ("GET", "/organizations/{organization}/templates/{templatename}", template_by_name),
        ("GET", "/templates/{template}", template),
        ("GET", "/templateversions/{templateversion}", version),
        ("GET", "/templateversions/{templateversion}/rich-parameters", rich_parameters),
        ("GET", "/templateversions/{templateversion}/presets", presets),
        ("GET", "/templateversions/{templateversion}/resources", version_resources),
        ("GET", "/regions", regions),
        ("GET", "/applications/host", app_host),
        ("POST", "/users/{user}/workspaces", create_workspace),
        ("POST", "/organizations/{organization}/members/{user}/workspaces", create_workspace),
        ("GET", "/workspaces", workspaces),
        ("GET", "/users/{user}/workspace/{workspacename}", workspace_by_name),
        ("GET", "/workspaces/{workspace}", workspace),
        ("POST", "/workspaces/{workspace}/builds", create_build),
        ("PUT", "/workspaces/{workspace}/ttl", put_ttl),
        ("GET", "/workspaces/{workspace}/builds", builds),
        ("GET", "/workspacebuilds/{workspacebuild}", build),
        ("GET", "/workspacebuilds/{workspacebuild}/parameters", build_parameters),
        ("PATCH", "/workspacebuilds/{workspacebuild}/cancel", cancel_build),
    ]
    routes = [endpoint(b, "GET", f"{v2}/buildinfo", buildinfo, auth=False),
              endpoint(b, "PATCH", f"{v2}/workspaceagents/me/app-status", patch_app_status, auth=False),
              endpoint(b, "POST", f"{v2}/workspaceagents/me/rpc/{{method}}", agent_rpc, auth=False)]
    routes += [endpoint(b, method, v2 + path, handler) for method, path, handler in table]
    for prefix in (v2, "/api/experimental"):  # each router answers its own unknown routes
        routes.append(Route(prefix + "/{rest:path}", _not_found(b), methods=["GET", "POST", "PUT", "PATCH", "DELETE"]))
    return routes


def _not_found(b: Backend):
    async def run(request: Request) -> Response:
        return error_response(ErrorAnswer(404, "Route not found."), b)
    return run
