"""Typed async client for Coder's REST API and for workspace apps behind Coder's app proxy.

Every call goes through `CoderClient._request`, which maps failures to the
errors of `fleet_mcp.coder.errors`, retries only safe (GET) requests, reads the
answer within its size cap and the request's deadline (`bounded`), and
validates the JSON into the models of `fleet_mcp.coder.schemas`.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json as _json
import random
import ssl
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from functools import lru_cache, cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, overload

import httpx
from httpx_sse import ServerSentEvent
import pydantic

from fleet_mcp.coder import bounded, netcause
from fleet_mcp.coder.apps import App, AppHosting, ConnectTo, _seg, app_proxy_path
from fleet_mcp.coder.bounded import Limit
from fleet_mcp.coder.errors import (
    CoderError, Oversized, PathAppsDisabled, RateLimited, ServerError, Unavailable, error_from_response, redact,
)
from fleet_mcp.coder.schemas import (
    AppHost, BuildInfo, BuildParameter, Organization, Preset, Presets,
    Region, RegionsPage, RichParameter, Template, TemplateVersion, User, Workspace, WorkspaceBuild,
    WorkspaceResource, WorkspacesPage,
)

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["APP_HEADERS", "App", "CoderClient", "ConnectTo", "Transition", "app_proxy_path"]

# Headers a workspace app's own door asks for (the runner's key), added to requests sent while set.
APP_HEADERS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("fleet_mcp_app_headers", default=())

# httpcore runs `import sniffio` each time it makes a lock or semaphore, several times per request.
# Without sniffio installed (anyio 4 no longer needs it), each failed import searches sys.path again,
# tenths of a millisecond a request. Recording its absence once makes that import fail at once; httpcore
# then assumes asyncio, exactly as it does whenever sniffio is missing.
if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]

Transition = Literal["start", "stop", "delete"]
T = TypeVar("T")

_RETRY_STATUSES = frozenset({500, 502, 503, 504})
# Failures worth another try: the request may never have arrived, or its answer was lost or garbled.
# A refused connection, an unknown host or a failed TLS handshake is not: nothing listens there, or it is
# not Coder, and a second try a moment later only spends the caller's time.
_TRANSIENT_CAUSES = frozenset({"timeout", "dropped", "garbled"})
_BACKOFF_FIRST_S, _BACKOFF_MAX_S, _JITTER_S = 0.25, 4.0, 0.5
# At most 100 connections, every one kept for 5 s after its answer: a show_agents of 20 agents sends 40 requests
# at once, and a pool keeping only httpx's default 20 would open (and, over TLS, handshake) 20 anew each call.
# A request waits at most POOL_WAIT_S for a free connection.
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=5.0)
_POOL_WAIT_S = 10.0


class CoderClient:
    """Async client of one Coder deployment at `url`, authenticated by a session `token`.

    Use as `async with CoderClient(url, token) as coder: ...`. Without a token, only what Coder answers
    anyone (buildinfo). `transport` replaces the network (tests pass an ASGI transport or a loopback
    emulator). `request_timeout_s` bounds one request once connected, its answer read whole;
    `connect_timeout_s` connecting; reads that fail transiently are tried again for up to `retry_budget_s`
    (writes never), and never past `deadline()` (loop time) when it answers one: the caller's own deadline.
    `on_request` is called for every request sent (the caller counts them). `connect_to` sends requests for
    some hosts to another address (curl's --connect-to; see `apps`). Raises only `CoderError`s.
    """

    def __init__(self, url: str, token: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 5.0, retry_budget_s: float = 20.0,
                 on_request: Callable[[], None] | None = None,
                 deadline: Callable[[], float | None] | None = None, connect_to: ConnectTo | None = None) -> None:
        self.on_request = on_request
        self._deadline = deadline
        self._retry_budget_s = retry_budget_s
        self._secret = token or None
        # Requests go straight to httpx's transport: the client layer (URL merging, cookies, auth and
        # redirect flows, none of which the fleet uses) costs a tenth of a millisecond a request, and
        # cookies must not be kept (a stored coder_session_token cookie that differs from the header
        # makes Coder answer 400 "CSRF error").
        self._transport = transport or _transport(url)
        self._base = url.rstrip("/")
        self.apps = AppHosting(url)
        self._connect_to = connect_to or ConnectTo()
        # One request's whole time: connecting, then the answer to its last byte (a body may drip for ever).
        self._deadline_s = connect_timeout_s + request_timeout_s
        self._headers = [
            *([("Coder-Session-Token", self._secret)] if self._secret else []),
            ("Accept", "application/json"),
            ("Accept-Encoding", "gzip, deflate"),
            ("User-Agent", "coder-fleet-mcp"),
        ]
        self._timeouts = httpx.Timeout(request_timeout_s, connect=connect_timeout_s,
                                       pool=min(_POOL_WAIT_S, request_timeout_s)).as_dict()

    async def __aenter__(self) -> CoderClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._transport.aclose()

    def __repr__(self) -> str:
        return f"CoderClient({self._base!r})"

    # --- deployment, users, organizations ------------------------------------------

    async def buildinfo(self) -> BuildInfo:
        """Coder's version and URLs (`GET /api/v2/buildinfo`)."""
        return await self._request("GET", "/api/v2/buildinfo", BuildInfo, limit="status")

    async def me(self) -> User:
        """The user the token belongs to."""
        return await self._request("GET", "/api/v2/users/me", User, limit="status")

    async def organizations(self) -> list[Organization]:
        """Every organization the user can see."""
        return await self._request("GET", "/api/v2/organizations", list[Organization])

    async def regions(self) -> list[Region]:
        """Proxy regions, with their path-app URL and wildcard app hostname."""
        page = await self._request("GET", "/api/v2/regions", RegionsPage)
        return list(page.regions)

    async def app_host(self) -> str:
        """The wildcard app host (`*.apps.example.com[:port]`), "" where subdomain apps are not set up."""
        return (await self._request("GET", "/api/v2/applications/host", AppHost, limit="status")).host

    # --- templates ------------------------------------------------------------------

    async def templates(self, q: str | None = None) -> list[Template]:
        """Readable templates, optionally filtered by Coder's template search query `q`."""
        params = {"q": q} if q else None
        return await self._request("GET", "/api/v2/templates", list[Template], params=params)

    async def template(self, template_id: str) -> Template:
        """One template by ID."""
        return await self._request("GET", f"/api/v2/templates/{_seg(template_id)}", Template)

    async def template_by_name(self, org: str, name: str) -> Template:
        """One template by exact name within an organization (ID, name or `default`)."""
        path = f"/api/v2/organizations/{_seg(org)}/templates/{_seg(name)}"
        return await self._request("GET", path, Template)

    async def template_version(self, version_id: str) -> TemplateVersion:
        """One template version, with its import job."""
        return await self._request("GET", f"/api/v2/templateversions/{_seg(version_id)}", TemplateVersion)

    async def rich_parameters(self, version_id: str) -> list[RichParameter]:
        """The parameters a template version declares."""
        path = f"/api/v2/templateversions/{_seg(version_id)}/rich-parameters"
        return await self._request("GET", path, list[RichParameter])

    async def presets(self, version_id: str) -> list[Preset]:
        """The presets of a template version (`[]` when Coder answers `null`)."""
        return await self._request("GET", f"/api/v2/templateversions/{_seg(version_id)}/presets", Presets)

    async def template_version_resources(self, version_id: str) -> list[WorkspaceResource]:
        """What a template version provisions: its resources, their agents and each agent's apps."""
        path = f"/api/v2/templateversions/{_seg(version_id)}/resources"
        return await self._request("GET", path, list[WorkspaceResource])

    # --- workspaces -------------------------------------------------------------------

    async def create_workspace(
        self,
        user: str,
        *,
        name: str,
        template_id: str | None = None,
        template_version_id: str | None = None,
        preset_id: str | None = None,
        parameters: dict[str, str] | None = None,
        ttl_ms: int | None = None,
    ) -> Workspace:
        """Create a workspace for `user` from a template (active version) or a version.

        Exactly one of `template_id` and `template_version_id` is required. Preset
        values win over `parameters` of the same name; undeclared names are dropped
        by Coder without an error.
        """
        if (template_id is None) == (template_version_id is None):
            raise ValueError("give exactly one of template_id and template_version_id")
        body: dict[str, Any] = {"name": name, "rich_parameter_values": _values(parameters or {})}
        if template_id is not None:
            body["template_id"] = template_id
        if template_version_id is not None:
            body["template_version_id"] = template_version_id
        if preset_id is not None:
            body["template_version_preset_id"] = preset_id
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        return await self._request("POST", f"/api/v2/users/{_seg(user)}/workspaces", Workspace, json=body)

    async def workspaces(self, q: str = "", limit: int = 0, offset: int = 0) -> WorkspacesPage:
        """One page of workspaces matching Coder's search query `q` (limit 0 = no limit)."""
        params: dict[str, Any] = {"q": q} if q else {}
        if limit:
            params["limit"] = limit
        if offset:
            params["offset"] = offset
        return await self._request("GET", "/api/v2/workspaces", WorkspacesPage, params=params, limit="listing")

    async def workspace(self, workspace_id: str) -> Workspace:
        """One workspace by ID; a deleted one raises `Gone`."""
        return await self._request("GET", f"/api/v2/workspaces/{_seg(workspace_id)}", Workspace)

    async def workspace_by_name(self, user: str, name: str, *, include_deleted: bool = False) -> Workspace:
        """One workspace by owner and name (case-insensitive); missing (or deleted, unless asked) is `NotFound`."""
        path = f"/api/v2/users/{_seg(user)}/workspace/{_seg(name)}"
        params = {"include_deleted": "true"} if include_deleted else None
        return await self._request("GET", path, Workspace, params=params)

    # --- builds ---------------------------------------------------------------------------

    async def create_build(
        self,
        workspace_id: str,
        transition: Transition,
        *,
        parameters: dict[str, str] | None = None,
        orphan: bool = False,
    ) -> WorkspaceBuild:
        """Start a build (`start`, `stop` or `delete`); `Conflict` while another build is active."""
        body: dict[str, Any] = {"transition": transition}
        if parameters:
            body["rich_parameter_values"] = _values(parameters)
        if orphan:
            body["orphan"] = True
        path = f"/api/v2/workspaces/{_seg(workspace_id)}/builds"
        return await self._request("POST", path, WorkspaceBuild, json=body)

    async def builds(self, workspace_id: str, limit: int = 0, offset: int = 0) -> list[WorkspaceBuild]:
        """A workspace's builds, newest first."""
        params = {k: v for k, v in (("limit", limit), ("offset", offset)) if v}
        path = f"/api/v2/workspaces/{_seg(workspace_id)}/builds"
        return await self._request("GET", path, list[WorkspaceBuild], params=params, limit="listing")

    async def build(self, build_id: str) -> WorkspaceBuild:
        """One build by ID, with its resources, agents, apps and app statuses."""
        return await self._request("GET", f"/api/v2/workspacebuilds/{_seg(build_id)}", WorkspaceBuild)

    async def build_parameters(self, build_id: str) -> list[BuildParameter]:
        """The parameter values a build used."""
        path = f"/api/v2/workspacebuilds/{_seg(build_id)}/parameters"
        return await self._request("GET", path, list[BuildParameter])

    async def cancel_build(self, build_id: str) -> None:
        """Cancel a pending or running build (the template must allow it, else `Forbidden`)."""
        await self._request("PATCH", f"/api/v2/workspacebuilds/{_seg(build_id)}/cancel", None, limit="status")

    # --- workspace apps through the app proxy --------------------------------------------

    @overload
    async def app_request(self, method: str, app: App, rest: str, model: type[T], *, json: Any = None,
                          limit: Limit = "status") -> T: ...

    @overload
    async def app_request(self, method: str, app: App, rest: str, model: None = None, *, json: Any = None,
                          limit: Limit = "status") -> None: ...

    async def app_request(self, method: str, app: App, rest: str, model: type[T] | None = None, *,
                          json: Any = None, limit: Limit = "status") -> Any:
        """A request to `rest` of a workspace app, by path or subdomain as the deployment allows; mapped, retried
        and parsed as any other; its answer may be at most `bounded.LIMITS[limit]` bytes."""
        url = await self.app_url(app, rest)
        try:
            return await self._request(method, url, model, json=json, limit=limit)
        except PathAppsDisabled:
            if (again := await self._path_refused(app, rest, url)) is None:
                raise
            return await self._request(method, again, model, json=json, limit=limit)

    @asynccontextmanager
    async def app_events(self, app: App, rest: str,
                         limit: Limit = "events") -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
        """The server-sent events of a streamed GET of a workspace app, as they come; failures raise as for
        other calls, and `Oversized` once more than `bounded.LIMITS[limit]` bytes came. The caller bounds
        the time."""
        url = await self.app_url(app, rest)
        try:
            response = await self._open_stream(url)
        except PathAppsDisabled:
            if (again := await self._path_refused(app, rest, url)) is None:
                raise
            url, response = again, await self._open_stream(again)
        try:
            yield self._bounded_events(response, f"GET {url}", bounded.LIMITS[limit])
        finally:
            await response.aclose()

    async def _open_stream(self, url: str) -> httpx.Response:
        if self.on_request is not None:
            self.on_request()
        where = f"GET {url}"
        try:
            response = await self._send("GET", url, accept="text/event-stream")
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc
        if not response.is_success:
            try:
                raise error_from_response(await self._error_body(response, where), secret=self._secret)
            finally:
                await response.aclose()
        return response

    async def app_url(self, app: App, rest: str = "") -> str:
        """Where `rest` of `app` is asked: its subdomain URL, or its path on Coder's URL."""
        if (app.subdomain or self.apps.path_refused) and self.apps.wildcard is None:
            self.apps.wildcard = await self.app_host()
        return self.apps.url(app, rest) if self.apps.by_subdomain(app) else app.path(rest)

    async def path_apps_refused(self, owner: str) -> bool:
        """Whether Coder refuses path apps (`--disable-path-apps`), which it tells a non-admin no other way:
        asks for an app of a workspace nobody has, refused with 403 before any lookup, else 404."""
        try:
            await self._request("GET", App(owner, "fleet-mcp-probe", None, "fleet-mcp-probe").path(), None,
                                limit="status")
        except PathAppsDisabled:
            return True
        except CoderError:
            pass
        return False

    async def app_host_unreachable(self, owner: str) -> str | None:
        """Why an app host under Coder's wildcard does not reach Coder (DNS, FLEET_MCP_CONNECT_TO), or None
        when it does: Coder answers its own 404 for an app nobody has."""
        wildcard = await self.app_host()
        if not wildcard:
            return "Coder reports no wildcard app host"
        probe = App(owner, "fleet-mcp-probe", None, "fleet-mcp-probe", subdomain=True)
        hosting = AppHosting(self._base)
        hosting.wildcard = wildcard
        try:
            await self._request("GET", hosting.url(probe), None, limit="status")
        except CoderError as exc:
            return exc.message if exc.status is None else None
        return None

    async def _path_refused(self, app: App, rest: str, tried: str) -> str | None:
        """Coder refused the path form: from now on apps go by subdomain; the URL to try instead, if any."""
        self.apps.path_refused = True
        again = await self.app_url(app, rest)
        return again if again != tried else None

    async def _bounded_events(self, response: httpx.Response, where: str,
                              cap: int) -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in bounded.events(response, cap):
                yield event
        except (bounded.TooLarge, bounded.Undecodable) as exc:
            raise _oversized(where, exc) from None
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc

    async def _send(self, method: str, path: str, *, params: Any = None, json: Any = None,
                    accept: str | None = None) -> httpx.Response:
        """One request through the transport; the answer's body is not read yet."""
        headers = self._headers if accept is None else [
            (k, accept if k == "Accept" else v) for k, v in self._headers]
        headers = [*headers, *APP_HEADERS.get()]
        # `path` is a path on Coder's URL, or a whole URL (a subdomain app's).
        url = _url(self._base + path if path.startswith("/") else path)
        request = httpx.Request(method, url, params=params, json=json, headers=headers,
                                extensions={"timeout": self._timeouts})
        if self._connect_to:
            self._connect_to.route(request)
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    # --- the one request method ---------------------------------------------------------------

    @overload
    async def _request(self, method: str, path: str, model: type[T], *, params: dict[str, Any] | None = None,
                       json: Any = None, limit: Limit = "record") -> T: ...

    @overload
    async def _request(self, method: str, path: str, model: None, *, params: dict[str, Any] | None = None,
                       json: Any = None, limit: Limit = "record") -> None: ...

    async def _request(self, method: str, path: str, model: type[T] | None, *,
                       params: dict[str, Any] | None = None, json: Any = None, limit: Limit = "record") -> Any:
        """Send, map failures to typed errors, retry if safe, validate into `model` (None: no body): typed as
        `model` for its caller."""
        call = _Call(method, path, params, json, model, bounded.LIMITS[limit])
        if method != "GET" or self._retry_budget_s <= 0:  # never repeat a request that may have changed
            return await self._send_once(call)  # something; no budget, no second try
        started = asyncio.get_running_loop().time()
        try:
            # Most reads are answered at once: the retry machinery is set up only after a failure.
            return await self._send_once(call)
        except CoderError as exc:
            if not _is_transient(exc):
                raise
            return await self._retried(exc, started, call)

    async def _retried(self, failure: CoderError, started: float, call: _Call) -> Any:
        """The read again after its first try failed with `failure`: exponential backoff with jitter (429: the
        server's Retry-After), all within the retry budget counted from `started`."""
        # Imported here: the start-up check of Coder has no retry budget, so start-up never needs tenacity.
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay

        loop = asyncio.get_running_loop()
        budget = self._retry_budget_s
        if self._deadline is not None and (deadline := self._deadline()) is not None:
            budget = max(0.0, min(budget, deadline - started))
        if loop.time() - started >= budget:
            raise failure

        def delay(exc: BaseException | None, failures: int) -> float:
            wait = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2.0 ** (failures - 1)) + random.uniform(0, _JITTER_S)
            if isinstance(exc, RateLimited) and exc.retry_after is not None:
                wait = exc.retry_after
            return max(0.0, min(wait, budget - (loop.time() - started)))

        def wait(state: RetryCallState) -> float:
            return delay(state.outcome.exception() if state.outcome else None, state.attempt_number + 1)

        await asyncio.sleep(delay(failure, 1))
        async for attempt in AsyncRetrying(retry=retry_if_exception(_is_transient), wait=wait,
                                           stop=stop_after_delay(max(0.0, budget - (loop.time() - started))),
                                           reraise=True):
            with attempt:
                return await self._send_once(call)
        raise failure  # pragma: no cover - reraise=True: the loop returns or raises

    async def _send_once(self, call: _Call) -> Any:
        """One try: the answer read whole within its cap and the request's deadline, then validated."""
        where = f"{call.method} {call.path}"
        if self.on_request is not None:
            self.on_request()
        try:
            async with asyncio.timeout(self._deadline_s):  # the whole exchange, however slowly the body drips
                response = await self._send(call.method, call.path, params=call.params, json=call.body)
                try:
                    if not response.is_success:
                        raise error_from_response(await self._error_body(response, where), secret=self._secret)
                    content = await bounded.read(response, call.cap)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise Unavailable(None, f"No complete answer to {where} within {self._deadline_s:g} s",
                              cause="timeout") from None
        except (bounded.TooLarge, bounded.Undecodable) as exc:
            raise _oversized(where, exc) from None
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc
        return _parsed(where, response, content, call.model)

    async def _error_body(self, response: httpx.Response, where: str) -> httpx.Response:
        """The error answer with its body read (only its start, decoded), as `error_from_response` reads it."""
        try:
            body = await bounded.read(response, bounded.ERROR_BODY, truncate=True)
        except bounded.Undecodable:
            body = b""
        headers = [(k, v) for k, v in response.headers.raw
                   if k.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=body, request=response.request,
                              extensions=response.extensions)

    def _no_answer(self, where: str, exc: httpx.HTTPError) -> Unavailable:
        kind, phrase = netcause.cause(exc)
        reason = redact(f"{type(exc).__name__}: {exc}".rstrip(": "), self._secret)
        return Unavailable(None, f"No answer to {where}: {phrase}", reason, cause=kind)


class _Call(NamedTuple):
    method: str
    path: str
    params: Any
    body: Any
    model: Any
    cap: int


def _parsed(where: str, response: httpx.Response, content: bytes, model: Any) -> Any:
    """The answer validated into `model` (None: only checked to be JSON, or empty)."""
    if not content.strip():
        return None if model is None else _validated(where, model, b"null")
    if "html" in response.headers.get("content-type", "").lower():
        raise Unavailable(None, f"Expected JSON from {where}, got an HTML page", cause="garbled")
    if model is None:
        try:
            _json.loads(content)
        except ValueError as exc:
            raise Unavailable(None, f"Unreadable JSON from {where}", str(exc), cause="garbled") from None
        return None
    return _validated(where, model, content)


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for this block, which must not await (blocks nest).

    For code that makes or drops a parsed listing at once: 1,000 real workspaces are ~100,000 objects, no
    cycles among them, and the collections their allocation sets off walk the whole heap, again and again.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _validated(where: str, model: Any, content: bytes) -> Any:
    try:
        with collection_paused():  # 1,000 real-sized workspaces: 160-190 -> 100-130 ms CPU (bench/RESULTS.md)
            return _adapter(model).validate_json(content)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise Unavailable(None, f"Unreadable JSON from {where}", first["msg"], cause="garbled") from None
        loc = ".".join(str(part) for part in first["loc"])
        raise Unavailable(None, f"Unexpected answer to {where}: {loc}: {first['msg']}") from None


def _oversized(where: str, exc: bounded.TooLarge | bounded.Undecodable) -> Oversized:
    if isinstance(exc, bounded.TooLarge):
        return Oversized(None, f"the answer to {where} is {exc}, the cap for its kind", cause="oversized")
    return Oversized(None, f"the answer to {where} cannot be read: {exc}", cause="oversized")


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, RateLimited):
        return True
    if isinstance(exc, ServerError):
        return exc.status in _RETRY_STATUSES
    return isinstance(exc, Unavailable) and exc.cause in _TRANSIENT_CAUSES


def _transport(url: str) -> httpx.AsyncBaseTransport:
    """httpx's own transport for this Coder URL, through the proxy the environment names for it
    (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY respected), as `httpx.AsyncClient(trust_env=True)` would."""
    parsed = httpx.URL(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parsed.scheme) or proxies.get("all")
    if proxy and urllib.request.proxy_bypass(parsed.host):
        proxy = None
    return httpx.AsyncHTTPTransport(verify=_tls(), proxy=proxy, limits=_LIMITS)


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """httpx's default TLS settings (its CA bundle, or SSL_CERT_FILE/SSL_CERT_DIR), built once per process.

    Each `httpx.AsyncClient` would load the CA bundle again, ~25 ms; start-up makes two clients
    (the check of Coder, then the server's own).
    """
    return httpx.create_ssl_context()


@lru_cache(maxsize=4096)
def _url(url: str) -> httpx.URL:
    """Parsed once: the same few paths (each agent's status and messages) are asked over and over, and
    httpx checks every character of a URL it parses."""
    return httpx.URL(url)


@cache
def _adapter(model: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(model)


def _values(parameters: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in parameters.items()]
