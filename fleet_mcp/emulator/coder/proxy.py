"""Coder's workspace app proxy: path and subdomain app URLs, failing as Coder fails.

Path form `/@{owner}/{workspace}[.{agent}]/apps/{slug}/{rest}` (`%40` too, as
servers decode the path); subdomain form `{slug}[--{agent}]--{workspace}--{owner}`
under the backend's `wildcard_hostname`, which `AppHosts` turns into the path
route. Checks run in Coder's order (coderd/workspaceapps): path apps switched
off 403; `@me` 404; the app is looked up before anyone is authorised (unknown
owner, workspace, agent or app 404 "Application Not Found", a stop build 400
"Workspace Offline", with or without a token); then no or a bad token 303 to
/login; another user's path app 404; an agent not connected 404 "Application
Unavailable"; the app root without its slash 307; nothing listening behind the
app 502 "Bad Gateway". The rest is forwarded to AgentAPI (`ccw`) or, with the
runner runtime, to the workspace's `fleet-mcp runner` (`fleet`). Failures are
HTML as `site.RenderStaticErrorPage` writes them.

An app request is authenticated as Coder v2.27.1 does (`AppCookies.TokenFromRequest`,
coderd/workspaceapps/cookies.go): `httpmw.APITokenFromRequest` first (the
`coder_session_token` cookie, its query parameter, `Coder-Session-Token`, a Bearer
token, `access_token`), then the app session cookie of the access method. What is
forwarded is what Coder's `proxyWorkspaceApp` forwards: every header and query
parameter as it came, the Cookie headers without Coder's own cookies
(`httpapi.StripCoderCookies`) and nothing else taken out. Whatever listens on
the app's port gets it: `AppProxy.listener` stands in for an agent that stopped
the app's server and bound its port; `/emulator/apps/...` is the app's own
server as a process inside the workspace reaches it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import httpx
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..agentapi.claude import SLUG, ClaudeCode
from ..agentapi.server import WORKSPACE_KEY, AgentAPI
from ..runners.runtime import HOP_BY_HOP, RUNNER_SLUG, Runners
from .backend import Backend
from .errors import ErrorAnswer
from .routes import error_response, token_of
from .state import Agent, User, Workspace

__all__ = ["AppHosts", "AppProxy", "app_token_of", "bad_gateway", "page", "strip_coder_cookies"]

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
AGENTAPI_PATHS = {"status", "messages", "message", "events", "upload"}
SUBDOMAIN_KEY = "emulator.app_host"  # set by AppHosts only: the request came by subdomain
SIGNED_OUT = "You are signed out or your session has expired. Please sign in again to continue."
NAME = r"[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*"
APP_HOST = re.compile(rf"^(?P<slug>{NAME})(?:--(?P<agent>{NAME}))?--(?P<workspace>{NAME})--(?P<owner>{NAME})$")
OWNER_ONLY = ('path-based apps with "owner" share level are only accessible by the workspace owner '
              "(see --dangerous-allow-path-app-site-owner-access)")
GO_REDIRECT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})  # net/http
GO_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;", "+": "&#43;"})
STATUS_TEXT = {303: "See Other", 307: "Temporary Redirect"}
# Coder's own cookies (codersdk: SessionTokenCookie, OAuth2StateCookie, OAuth2RedirectCookie,
# PathAppSessionTokenCookie, SignedAppTokenCookie), and the subdomain app session cookie's prefix.
CODER_COOKIES = ("coder_session_token", "oauth_state", "oauth_redirect", "coder_path_app_session_token",
                 "coder_signed_app_token")
SUBDOMAIN_COOKIE = "coder_subdomain_app_session_token"
TRIM = " \t\r\n"  # textproto.TrimString


def strip_coder_cookies(header: str) -> str:
    """`httpapi.StripCoderCookies` (coderd/httpapi/cookie.go): a Cookie header without Coder's own cookies."""
    kept = []
    for part in header.strip(TRIM).split(";"):
        part = part.strip(TRIM)
        name = part.partition("=")[0]
        if part and name not in CODER_COOKIES and not name.startswith(SUBDOMAIN_COOKIE):
            kept.append(part)
    return "; ".join(kept)


def subdomain_cookie(app_hostname: str) -> str:
    """`SubdomainAppSessionTokenCookie`: one name per app hostname (16 bytes of its SHA-256, hex)."""
    return f"{SUBDOMAIN_COOKIE}_{hashlib.sha256(app_hostname.encode()).digest()[:16].hex()}"


def app_token_of(request: Request, subdomain: bool, app_hostname: str) -> str | None:
    """`AppCookies.TokenFromRequest` of Coder v2.27.1: the API's token sources, then the app session cookie
    (newer Coder asks the app cookie first; no request of the fleet's carries both)."""
    cookie = subdomain_cookie(app_hostname) if subdomain else "coder_path_app_session_token"
    return token_of(request) or request.cookies.get(cookie) or None


def forwarded_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What `proxyWorkspaceApp` hands the app: every header as it came, each Cookie header stripped."""
    return [(k, strip_coder_cookies(v.decode("latin-1")).encode("latin-1") if k.lower() == b"cookie" else v)
            for k, v in headers]


def _esc(text: str) -> str:
    return text.translate(GO_HTML)


def page(status: int, title: str, description: str, actions: Sequence[tuple[str, str]] = (),
         warnings: Sequence[str] = ()) -> Response:
    """Coder's static error page (`actions`: (text, url); no url is a Retry button)."""
    heading = f"{status} - {_esc(title)}"
    warn = "".join(f"\n\t\t\t\t\t<li>{_esc(w)}</li>" for w in warnings)
    warn = f'\n\t\t\t<div class="warning">\n\t\t\t\t<ul>{warn}\n\t\t\t\t</ul>\n\t\t\t</div>' if warnings else ""
    buttons = "".join(f'\n\t\t\t\t<a href="{_esc(url)}">{_esc(text)}</a>' if url else
                      f'\n\t\t\t\t<button onclick="window.location.reload()">{_esc(text)}</button>'
                      for text, url in actions)
    buttons = f'\n\t\t\t<div class="button-group">{buttons}\n\t\t\t</div>' if actions else ""
    body = (f'<!doctype html>\n<html lang="en">\n\t<head>\n\t\t<meta charset="UTF-8" />\n'
            f"\t\t<title>{heading}</title>\n\t</head>\n\t<body>\n\t\t<div class=\"container\">\n"
            f"\t\t\t<header>\n\t\t\t\t<h1>{heading}</h1>\n\t\t\t\t<p>{_esc(description)}</p>\n\t\t\t</header>"
            f"{warn}{buttons}\n\t\t</div>\n\t</body>\n</html>\n")
    return Response(body, status, media_type="text/html; charset=utf-8")


async def read_body(receive) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def bad_gateway(app_url: str, back: str = "") -> Response:
    """Coder's answer when nothing listens behind an app."""
    where = app_url.removeprefix("http://").removeprefix("https://").rstrip("/") or "127.0.0.1"
    return page(502, "Bad Gateway", f"Failed to proxy request to application: dial tcp {where}: connect: "
                "connection refused", [("Retry", ""), *([("Back to site", back)] if back else [])])


def go_redirect(location: str, status: int, method: str) -> Response:
    """Go's `http.Redirect`: a small HTML body on GET, none otherwise."""
    body = f'<a href="{location.translate(GO_REDIRECT)}">{STATUS_TEXT[status]}</a>.\n\n' if method == "GET" else ""
    media = "text/html; charset=utf-8" if method in ("GET", "HEAD") else None
    return Response(body, status, {"location": location}, media_type=media)


class Forward(Response):
    """Hands the request on to the app's server, as Coder's reverse proxy does."""

    def __init__(self, app: AgentAPI, ws: Workspace, path: str) -> None:
        super().__init__()
        self.app, self.ws, self.path = app, ws, path

    async def __call__(self, scope, receive, send) -> None:
        inner = {k: v for k, v in scope.items() if k not in ("router", "endpoint", "route", "path_params")}
        inner.update(path=self.path, raw_path=quote(self.path).encode(), root_path="")
        inner[WORKSPACE_KEY] = self.ws
        extra = [(k, v) for k, v in self.raw_headers if k != b"content-length"]

        async def send_on(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(inner, receive, send_on)


class Relay(Response):
    """Hands the request on to `url` over HTTP as Coder's reverse proxy does: method, headers (but hop-by-hop
    ones), query and body; the answer streamed back (event streams too)."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        super().__init__()
        self.client, self.url = client, url

    async def __call__(self, scope, receive, send) -> None:
        body = await read_body(receive)
        headers = [(k, v) for k, v in scope["headers"] if k.decode("latin-1").lower() not in HOP_BY_HOP]
        query = scope.get("query_string", b"").decode("latin-1")
        outgoing = self.client.build_request(scope["method"], self.url + (f"?{query}" if query else ""),
                                             headers=headers, content=body)
        try:
            answer = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError:
            return await bad_gateway(self.url)(scope, receive, send)
        try:
            kept = [(k, v) for k, v in answer.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
            extra = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
            await send({"type": "http.response.start", "status": answer.status_code, "headers": kept + extra})
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await answer.aclose()


@dataclass
class Target:
    owner: str
    workspace: str
    slug: str
    rest: str | None  # None: the app root without its trailing slash
    subdomain: str = ""  # the app host, when requested by subdomain

    def path(self, request: Request) -> str:
        """The path as the client asked for it."""
        return "/" + (self.rest or "") if self.subdomain else request.scope["path"]


class AppProxy:
    """The proxy's routes; AgentAPI behind every `ccw` app, nothing behind other apps."""

    def __init__(self, backend: Backend, claude: ClaudeCode, agentapi: AgentAPI,
                 runners: Runners | None = None) -> None:
        self.backend = backend
        self.claude = claude
        self.agentapi = agentapi
        self.runners = runners
        # What listens on every app's port instead of its server, when set: a base URL, each app at
        # `{listener}/{owner}/{workspace}/{slug}/` (an agent that stopped the server and bound the port).
        self.listener = ""
        self._client: httpx.AsyncClient | None = None

    def routes(self) -> list[Route]:
        base = "/@{owner}/{workspace_and_agent}/apps/{slug}"
        return [Route(base, self._route, methods=METHODS), Route(base + "/{rest:path}", self._route, methods=METHODS),
                Route("/emulator/apps/{owner}/{workspace}/{slug}/{rest:path}", self._inside, methods=METHODS)]

    async def aclose(self) -> None:
        """Close the connections to the listener, if any were made."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _inside(self, request: Request) -> Response:
        """The app's own server as a process in the workspace reaches it (`localhost:port`): no Coder, no token."""
        self.backend.settle()
        p = request.path_params
        found = self._lookup(request, Target(p["owner"], p["workspace"], p["slug"], p["rest"]))
        if isinstance(found, Response):
            return found
        return self._server(found[0], p["slug"], "/" + p["rest"]) or bad_gateway("127.0.0.1")

    async def _route(self, request: Request) -> Response:
        p = request.path_params
        # Coder ignores the agent part for app slugs: the app names its agent.
        workspace = p["workspace_and_agent"].partition(".")[0]
        target = Target(p["owner"], workspace, p["slug"], p.get("rest"), request.scope.get(SUBDOMAIN_KEY, ""))
        b = self.backend
        b.on_request()
        rest = target.rest
        tail = "" if rest is None else "/" + (rest if not rest or rest in AGENTAPI_PATHS else "{path}")
        b.count(f"{request.method} /@{{owner}}/{{workspace}}/apps/{{slug}}{tail}")
        response = self._resolve(request, target)
        response.headers["X-Coder-Build-Version"] = b.version
        return response

    def _resolve(self, request: Request, target: Target) -> Response:
        b = self.backend
        back = ("Back to site", self._site(request))
        if not target.subdomain:
            if b.disable_path_apps:
                return page(403, "Forbidden", "Path-based applications are disabled on this Coder deployment by "
                            "the administrator.", [back])
            if target.owner == "me":
                return page(404, "Application Not Found",
                            "Applications must be accessed with the full username, not @me.", [back])
        user = self._user(request)
        if user:
            try:
                b.check_rate(user, target.path(request))
            except ErrorAnswer as err:
                return error_response(err, b)
        found = self._lookup(request, target)
        if isinstance(found, Response):
            return found
        ws, agent = found
        if user is None:
            return self._login(request, target)
        if ws.owner_id != user.id and (not target.subdomain or not b.is_owner(user)):
            return self._not_found(request, [OWNER_ONLY] if b.is_owner(user) else [])
        if agent.status != "connected":
            return page(404, "Application Unavailable", f'Agent state is "{agent.status}", not "connected"',
                        [("Retry", ""), back])
        if target.rest is None:
            return go_redirect(target.path(request) + "/", 307, request.method)
        request.scope["headers"] = forwarded_headers(request.scope["headers"])
        if self.listener:
            if self._client is None:
                self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))
            owner = self.backend.users[ws.owner_id].username
            return Relay(self._client, f"{self.listener.rstrip('/')}/{owner}/{ws.name}/{target.slug}/{target.rest}")
        return self._server(ws, target.slug, "/" + target.rest) or bad_gateway(
            "127.0.0.1:4300" if target.slug == RUNNER_SLUG else "127.0.0.1:3284", back[1])

    def _server(self, ws: Workspace, slug: str, path: str) -> Response | None:
        """The app's server, handed the request at `path`; None when nothing listens."""
        if slug == SLUG and self.claude.reachable(ws):
            return Forward(self.agentapi, ws, path)
        if slug == RUNNER_SLUG and self.runners and (url := self.runners.url_of(ws)):
            return self.runners.forward(url, path)
        return None

    def _lookup(self, request: Request, target: Target) -> tuple[Workspace, Agent] | Response:
        """Coder's `Request.getDatabase`: owner, workspace, latest build, agents, app."""
        b = self.backend
        ref = target.owner.lower()
        owner = next((u for u in b.users.values() if ref in (u.id, u.username.lower())), None)
        ws = owner and next((w for w in b.workspaces.values() if w.owner_id == owner.id and (
            w.id == target.workspace.lower() or (w.name.lower() == target.workspace.lower() and not w.deleted))),
            None)
        if not ws:
            return self._not_found(request)
        build = ws.latest_build
        if build.transition == "stop":
            site = self._site(request)
            return page(400, "Workspace Offline", 'Last workspace transition was to the "stop" state. Start the '
                        "workspace to access its applications.",
                        [("Back to site", site), ("View workspace", f"{site}/@{target.owner}/{target.workspace}")])
        agent = next((a for a in build.agents if any(app.slug == target.slug for app in a.apps)), None)
        if agent is None:  # no agents yet (or any more), or no such app
            return self._not_found(request)
        return ws, agent

    def _user(self, request: Request) -> User | None:
        subdomain = bool(request.scope.get(SUBDOMAIN_KEY))
        try:
            return self.backend.authenticate(app_token_of(request, subdomain, self.backend.wildcard_hostname))
        except ErrorAnswer:
            return None  # Coder treats a bad token as none here: optional auth

    def _login(self, request: Request, target: Target) -> Response:
        query = request.scope.get("query_string", b"").decode()
        path = target.path(request) + (f"?{query}" if query else "")
        if target.subdomain:  # app hosts log in through the dashboard, which sends an encrypted key back
            app_url = f"{request.url.scheme}://{target.subdomain}{path}"
            location = "/api/v2/applications/auth-redirect?" + urlencode({"redirect_uri": app_url})
        else:
            location = f"{self._site(request)}/login?" + urlencode({"message": SIGNED_OUT, "redirect": path})
        return go_redirect(location, 303, request.method)

    def _not_found(self, request: Request, warnings: Sequence[str] = ()) -> Response:
        return page(404, "Application Not Found", "The application or workspace you are trying to access does not "
                    "exist or you do not have permission to access it.", [("Back to site", self._site(request))],
                    warnings)

    @staticmethod
    def _site(request: Request) -> str:
        return f"{request.url.scheme}://{request.headers.get('host', 'localhost')}"


class AppHosts:
    """ASGI in front of the routes: a Host under the wildcard app hostname is an app request.

    Such a request goes on as its path-form twin, marked as subdomain-borne, so
    faults, counting and the proxy's rules see one route. `release()` ends the
    proxied event streams, then whatever the inner app holds (server shutdown).
    """

    def __init__(self, app, proxy: AppProxy) -> None:
        self.app = app
        self.proxy = proxy

    def release(self) -> None:
        self.proxy.agentapi.close_streams()
        getattr(self.app, "release", lambda: None)()

    async def __call__(self, scope, receive, send) -> None:
        pattern = self.proxy.backend.wildcard_hostname.lower()
        if scope["type"] != "http" or not pattern.startswith("*"):
            return await self.app(scope, receive, send)
        host = Headers(scope=scope).get("host", "").rsplit(":", 1)[0].lower().rstrip(".")
        if not host.endswith(pattern[1:]):
            return await self.app(scope, receive, send)
        sub = host[:len(host) - len(pattern) + 1]
        if not sub or "." in sub:
            return await self.app(scope, receive, send)
        match = APP_HOST.match(sub.rpartition("---")[2])
        if not match:
            answer = page(400, "Invalid Application URL", f'Could not parse subdomain application URL "{sub}": '
                          f'invalid application url format: "{sub}"')
            answer.headers["X-Coder-Build-Version"] = self.proxy.backend.version
            return await answer(scope, receive, send)
        path = f"/@{match['owner']}/{match['workspace']}/apps/{match['slug']}{scope['path']}"
        scope = {**scope, "path": path, "raw_path": quote(path).encode(), SUBDOMAIN_KEY: host}
        await self.app(scope, receive, send)
