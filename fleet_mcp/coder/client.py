"""Typed async client for Coder's REST API and for workspace apps behind Coder's app proxy.

Each call names its path and the model of its answer; `Exchange` (`fleet_mcp.coder.exchange`)
sends it, maps failures, retries reads and validates the answer. Apps are reached by path or
by subdomain, as `fleet_mcp.coder.apps` decides for the deployment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property
from typing import Any, Literal, TypeVar, overload

from httpx_sse import ServerSentEvent

from fleet_mcp.coder import bounded
from fleet_mcp.coder.apps import App, AppHosting, ConnectTo, _seg, app_proxy_path
from fleet_mcp.coder.bounded import Limit
from fleet_mcp.coder.errors import AppUnavailable, CoderError, PathAppsDisabled, Unavailable
from fleet_mcp.coder.exchange import Exchange, Headers
from fleet_mcp.coder.schemas import (
    AppHost,
    BuildInfo,
    BuildParameter,
    Organization,
    Preset,
    Presets,
    Region,
    RegionsPage,
    RichParameter,
    Template,
    TemplateVersion,
    User,
    Workspace,
    WorkspaceBuild,
    WorkspaceResource,
    WorkspacesPage,
)

__all__ = ["App", "CoderClient", "ConnectTo", "Transition", "app_proxy_path"]

Transition = Literal["start", "stop", "delete"]
T = TypeVar("T")
# A path-based app of `@me`: Coder answers it itself (403 when path apps are off, else 404), no app ever does.
_PROBE = "/@me/fleet-mcp-probe/apps/fleet-mcp-probe/"


class CoderClient(Exchange):
    """Async client of one Coder deployment at `url`, authenticated by a session `token`.

    Use as `async with CoderClient(url, token) as coder: ...`; the options are `Exchange`'s. Every call
    takes the caller's `deadline` (loop time, None for none): a read's retries never run past it.
    Raises only `CoderError`s.
    """

    @cached_property
    def apps(self) -> AppHosting:
        """What this deployment allows for apps, learned as calls go."""
        return AppHosting(self._base)

    # --- deployment, users, organizations ------------------------------------------

    async def buildinfo(self, *, deadline: float | None = None) -> BuildInfo:
        """Coder's version and URLs (`GET /api/v2/buildinfo`)."""
        return await self._request("GET", "/api/v2/buildinfo", BuildInfo, limit="status", deadline=deadline)

    async def me(self, *, deadline: float | None = None) -> User:
        """The user the token belongs to."""
        return await self._request("GET", "/api/v2/users/me", User, limit="status", deadline=deadline)

    async def organizations(self, *, deadline: float | None = None) -> list[Organization]:
        """Every organization the user can see."""
        return await self._request("GET", "/api/v2/organizations", list[Organization], deadline=deadline)

    async def regions(self, *, deadline: float | None = None) -> list[Region]:
        """Proxy regions, with their path-app URL and wildcard app hostname."""
        page = await self._request("GET", "/api/v2/regions", RegionsPage, deadline=deadline)
        return list(page.regions)

    async def app_host(self, *, deadline: float | None = None) -> str:
        """The wildcard app host (`*.apps.example.com[:port]`), "" where subdomain apps are not set up."""
        host = await self._request("GET", "/api/v2/applications/host", AppHost, limit="status", deadline=deadline)
        return host.host

    # --- templates ------------------------------------------------------------------

    async def templates(self, q: str | None = None, *, deadline: float | None = None) -> list[Template]:
        """Readable templates, optionally filtered by Coder's template search query `q`."""
        params = {"q": q} if q else None
        return await self._request("GET", "/api/v2/templates", list[Template], params=params, deadline=deadline)

    async def template(self, template_id: str, *, deadline: float | None = None) -> Template:
        """One template by ID."""
        return await self._request("GET", f"/api/v2/templates/{_seg(template_id)}", Template, deadline=deadline)

    async def template_by_name(self, org: str, name: str, *, deadline: float | None = None) -> Template:
        """One template by exact name within an organization (ID, name or `default`)."""
        path = f"/api/v2/organizations/{_seg(org)}/templates/{_seg(name)}"
        return await self._request("GET", path, Template, deadline=deadline)

    async def template_version(self, version_id: str, *, deadline: float | None = None) -> TemplateVersion:
        """One template version, with its import job."""
        path = f"/api/v2/templateversions/{_seg(version_id)}"
        return await self._request("GET", path, TemplateVersion, deadline=deadline)

    async def rich_parameters(self, version_id: str, *, deadline: float | None = None) -> list[RichParameter]:
        """The parameters a template version declares."""
        path = f"/api/v2/templateversions/{_seg(version_id)}/rich-parameters"
        return await self._request("GET", path, list[RichParameter], deadline=deadline)

    async def presets(self, version_id: str, *, deadline: float | None = None) -> list[Preset]:
        """The presets of a template version (`[]` when Coder answers `null`)."""
        path = f"/api/v2/templateversions/{_seg(version_id)}/presets"
        return await self._request("GET", path, Presets, deadline=deadline)

    async def template_version_resources(self, version_id: str, *,
                                         deadline: float | None = None) -> list[WorkspaceResource]:
        """What a template version provisions: its resources, their agents and each agent's apps."""
        path = f"/api/v2/templateversions/{_seg(version_id)}/resources"
        return await self._request("GET", path, list[WorkspaceResource], deadline=deadline)

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
        deadline: float | None = None,
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
        path = f"/api/v2/users/{_seg(user)}/workspaces"
        return await self._request("POST", path, Workspace, json=body, deadline=deadline)

    async def workspaces(self, q: str = "", limit: int = 0, offset: int = 0, *,
                         deadline: float | None = None) -> WorkspacesPage:
        """One page of workspaces matching Coder's search query `q` (limit 0 = no limit)."""
        params: dict[str, Any] = {"q": q} if q else {}
        if limit:
            params["limit"] = limit
        if offset:
            params["offset"] = offset
        return await self._request("GET", "/api/v2/workspaces", WorkspacesPage, params=params, limit="listing",
                                   deadline=deadline)

    async def workspace(self, workspace_id: str, *, deadline: float | None = None) -> Workspace:
        """One workspace by ID; a deleted one raises `Gone`."""
        return await self._request("GET", f"/api/v2/workspaces/{_seg(workspace_id)}", Workspace, deadline=deadline)

    async def workspace_by_name(self, user: str, name: str, *, include_deleted: bool = False,
                                deadline: float | None = None) -> Workspace:
        """One workspace by owner and name (case-insensitive); missing (or deleted, unless asked) is `NotFound`."""
        path = f"/api/v2/users/{_seg(user)}/workspace/{_seg(name)}"
        params = {"include_deleted": "true"} if include_deleted else None
        return await self._request("GET", path, Workspace, params=params, deadline=deadline)

    # --- builds ---------------------------------------------------------------------------

    async def create_build(
        self,
        workspace_id: str,
        transition: Transition,
        *,
        parameters: dict[str, str] | None = None,
        orphan: bool = False,
        deadline: float | None = None,
    ) -> WorkspaceBuild:
        """Start a build (`start`, `stop` or `delete`); `Conflict` while another build is active."""
        body: dict[str, Any] = {"transition": transition}
        if parameters:
            body["rich_parameter_values"] = _values(parameters)
        if orphan:
            body["orphan"] = True
        path = f"/api/v2/workspaces/{_seg(workspace_id)}/builds"
        return await self._request("POST", path, WorkspaceBuild, json=body, deadline=deadline)

    async def builds(self, workspace_id: str, limit: int = 0, offset: int = 0, *,
                     deadline: float | None = None) -> list[WorkspaceBuild]:
        """A workspace's builds, newest first."""
        params = {k: v for k, v in (("limit", limit), ("offset", offset)) if v}
        path = f"/api/v2/workspaces/{_seg(workspace_id)}/builds"
        return await self._request("GET", path, list[WorkspaceBuild], params=params, limit="listing", deadline=deadline)

    async def build(self, build_id: str, *, deadline: float | None = None) -> WorkspaceBuild:
        """One build by ID, with its resources, agents, apps and app statuses."""
        path = f"/api/v2/workspacebuilds/{_seg(build_id)}"
        return await self._request("GET", path, WorkspaceBuild, deadline=deadline)

    async def build_parameters(self, build_id: str, *, deadline: float | None = None) -> list[BuildParameter]:
        """The parameter values a build used."""
        path = f"/api/v2/workspacebuilds/{_seg(build_id)}/parameters"
        return await self._request("GET", path, list[BuildParameter], deadline=deadline)

    async def cancel_build(self, build_id: str, *, deadline: float | None = None) -> None:
        """Cancel a pending or running build (the template must allow it, else `Forbidden`)."""
        path = f"/api/v2/workspacebuilds/{_seg(build_id)}/cancel"
        await self._request("PATCH", path, None, limit="status", deadline=deadline)

    # --- workspace apps through the app proxy --------------------------------------------

    @overload
    async def app_request(self, method: str, app: App, rest: str, model: type[T], *, json: Any = None,
                          limit: Limit = "status", deadline: float | None = None, headers: Headers = ()) -> T: ...

    @overload
    async def app_request(self, method: str, app: App, rest: str, model: None = None, *, json: Any = None,
                          limit: Limit = "status", deadline: float | None = None, headers: Headers = ()) -> None: ...

    async def app_request(self, method: str, app: App, rest: str, model: type[T] | None = None, *,
                          json: Any = None, limit: Limit = "status", deadline: float | None = None,
                          headers: Headers = ()) -> Any:
        """A request to `rest` of a workspace app, by path or subdomain as the deployment allows, with the
        `headers` the app's own door asks for; mapped, retried and parsed as any other; its answer may be at
        most `bounded.LIMITS[limit]` bytes."""
        url = await self.app_url(app, rest, deadline=deadline)
        try:
            try:
                return await self._request(method, url, model, json=json, limit=limit, deadline=deadline,
                                           headers=headers, app=True)
            except PathAppsDisabled:
                if (again := await self._path_refused(app, rest, url, deadline)) is None:
                    raise
                return await self._request(method, again, model, json=json, limit=limit, deadline=deadline,
                                           headers=headers, app=True)
        except Unavailable as exc:
            if method != "GET" or exc.cause not in (None, "garbled"):  # a write's lost answer (the caller looks
                raise  # whether it landed), no answer at all (Coder's or its proxy's network), or oversized
            # A read's answer, unreadable or not the shape asked for: the app's own, and it cannot be used, as
            # one the proxy cannot reach; that agent's problem, never Coder's.
            raise AppUnavailable(exc.status, f"the app answered what the fleet cannot read: {exc.message}",
                                 exc.detail) from None

    @asynccontextmanager
    async def app_events(self, app: App, rest: str, limit: Limit = "events", *,
                         deadline: float | None = None) -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
        """The server-sent events of a streamed GET of a workspace app, as they come; failures raise as for
        other calls, and `Oversized` once more than `bounded.LIMITS[limit]` bytes came. The caller bounds
        the time."""
        url = await self.app_url(app, rest, deadline=deadline)
        try:
            response = await self._open_stream(url)
        except PathAppsDisabled:
            if (again := await self._path_refused(app, rest, url, deadline)) is None:
                raise
            url, response = again, await self._open_stream(again)
        try:
            yield self._bounded_events(response, f"GET {url}", bounded.LIMITS[limit])
        finally:
            await response.aclose()

    async def app_url(self, app: App, rest: str = "", *, deadline: float | None = None) -> str:
        """Where `rest` of `app` is asked: its subdomain URL, or its path on Coder's URL."""
        if (app.subdomain or self.apps.path_refused) and self.apps.wildcard is None:
            self.apps.wildcard = await self.app_host(deadline=deadline)
        return self.apps.url(app, rest) if self.apps.by_subdomain(app) else app.path(rest)

    async def path_apps_refused(self, *, deadline: float | None = None) -> bool:
        """Whether Coder refuses path apps (`--disable-path-apps`), which it tells a non-admin no other way.
        Asked of Coder itself, never of an app: it refuses path apps before reading the path (403), and answers
        an app of `@me` with its own 404 (coderd/workspaceapps/proxy.go), so no workspace's app answers this."""
        try:
            await self._request("GET", _PROBE, None, limit="status", deadline=deadline)
        except PathAppsDisabled:
            return True
        except Unavailable:  # no answer: Coder cannot be asked now
            raise
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

    async def _path_refused(self, app: App, rest: str, tried: str, deadline: float | None) -> str | None:
        """An app's request answered Coder's page refusing path apps. If Coder itself refuses them, from now on
        apps go by subdomain: the URL to try instead, if any. Otherwise the page was the app's own, as any
        agent can answer: that agent's problem (`AppUnavailable`), never a setting of the deployment."""
        if tried.startswith("/") and await self.path_apps_refused(deadline=deadline):
            self.apps.path_refused = True
            again = await self.app_url(app, rest, deadline=deadline)
            return again if again != tried else None
        raise AppUnavailable(None, "the app answered Coder's page refusing path-based apps, which Coder itself "
                                   "does not say: the agent's own answer")


def _values(parameters: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in parameters.items()]
