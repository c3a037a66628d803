"""The fleet: agents on top of Coder and their drivers. Decides; never speaks HTTP itself.

Everything the fleet knows lives in Coder (workspaces, build parameters, app
statuses) and in each workspace's driver, so two servers pointed at one Coder
see one fleet, and a restarted server re-adopts every agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TypeVar

from .builds import Builds
from .coder import errors as ce
from .coder.client import CoderClient
from .coder.schemas import Workspace, WorkspaceAppStatus
from .drivers import Busy, Driver, DriverError, Live, Message, NotSupported, Slugs, Unreachable, driver_for
from .errors import FleetError, bad_request, conflict, not_found
from .models import (
    Agent, AgentList, AgentLog, AgentSummary, CreatedAgent, DeletedAgent, DeleteResult, LogMessage, Metadata,
    Projects, Roles, ShownAgent, Task, TaskHistory, TaskResult,
)
from .polling import poll_until
from .projects import Catalog
from .rules import (
    FLEET_QUERY, LIST_TASK_CHARS, LOG_MESSAGE_CHARS, MANAGED, NAME_RE, PR_LINK, PROJECT, ROLE, SPEC, TASK,
    check_name, check_text, iso, paginate,
)
from .settings import Settings
from .status import READY, Snapshot, base_status, fresh_app_status, list_status, live_status, needs_attention

__all__ = ["Fleet"]

T = TypeVar("T")


class Fleet:
    """The fleet's operations. One instance per server, over one `CoderClient`."""

    def __init__(self, client: CoderClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.slugs = Slugs(runner=settings.runner_app_slug, agentapi=settings.agentapi_app_slug)
        self.catalog = Catalog(client, settings.template_cache_s)
        self.builds = Builds(client, settings)

    # --- projects and roles -------------------------------------------------------

    async def projects(self) -> Projects:
        return await self.catalog.projects()

    async def roles(self, project: str) -> Roles:
        return await self.catalog.roles(project)

    # --- finding an agent -----------------------------------------------------------

    async def _workspace(self, name: str) -> Workspace:
        if not name or len(name) > 32 or not NAME_RE.match(name):
            raise not_found(f"No agent named {name[:40]!r}.", agent_name=name[:40])
        try:
            return await self.client.workspace_by_name("me", name)
        except (ce.NotFound, ce.Gone):
            raise not_found(f"No agent named {name!r}.", agent_name=name) from None

    async def _params(self, ws: Workspace) -> dict[str, str]:
        params = {p.name: p.value for p in await self.client.build_parameters(ws.latest_build.id)}
        if params.get(MANAGED, "").lower() != "true":
            # Someone's own workspace, even of a fleet template: never shown, never touched.
            raise not_found(f"No agent named {ws.name!r}.", agent_name=ws.name)
        return params

    async def _find(self, name: str) -> tuple[Workspace, dict[str, str]]:
        """The token user's fleet workspace of that name, with its build parameters, marker confirmed."""
        ws = await self._workspace(name)
        return ws, await self._params(ws)

    def _driver(self, ws: Workspace) -> Driver | None:
        return driver_for(self.client, ws, self.slugs) if base_status(ws, self.slugs)[0] == READY else None

    async def _live(self, driver: Driver | None) -> tuple[Live | None, str | None]:
        if driver is None:
            return None, None
        try:
            return await driver.live(), None
        except Unreachable as exc:
            return None, str(exc)

    async def _snapshot(self, ws: Workspace) -> Snapshot:
        params, (live, unreachable) = await asyncio.gather(self._params(ws), self._live(self._driver(ws)))
        return Snapshot(ws, params, live, unreachable)

    async def _ready(self, name: str) -> tuple[Workspace, Driver, Live]:
        ws, params = await self._find(name)
        driver = self._driver(ws)
        live, unreachable = await self._live(driver)
        if driver is None or live is None:
            status, problem = live_status(Snapshot(ws, params, live, unreachable), self.slugs)
            raise bad_request(f"Agent {name!r} is {status}, not ready for work." + (f" {problem}" if problem else ""),
                              status=status)
        return ws, driver, live

    # --- describing -------------------------------------------------------------------

    async def list_agents(self, status: str | None = None, project: str | None = None) -> AgentList:
        page = await self.client.workspaces(FLEET_QUERY)
        agents = []
        for ws in page.workspaces:
            fresh = fresh_app_status(ws)
            summary = AgentSummary(name=ws.name, status=list_status(ws, self.slugs),  # type: ignore[arg-type]
                                   project=ws.template_name,
                                   current_task=fresh.message[:LIST_TASK_CHARS] if fresh and fresh.message else None)
            if status and summary.status != status:
                continue
            if project and project.lower() not in (ws.template_name.lower(), ws.template_display_name.lower()):
                continue
            agents.append(summary)
        return AgentList(agents=agents, total_count=len(agents))

    async def show(self, name: str) -> ShownAgent:
        ws = await self._workspace(name)
        driver = self._driver(ws)
        params, (live, unreachable), messages = await asyncio.gather(
            self._params(ws), self._live(driver), _quietly(driver.conversation()) if driver else _none())
        snap = Snapshot(ws, params, live, unreachable)
        status, problem = live_status(snap, self.slugs)
        if status in ("failed", "offline") and ws.latest_build.status == "running":
            problem = await self._with_reported_errors(ws, problem)
        statuses = await self._statuses(ws)
        current = next((m.content for m in reversed(messages or []) if m.role == "user"), None) if live else None
        if current is None and statuses and statuses[0].message:
            current = statuses[0].message
        return ShownAgent(agent=_agent(ws, params, status, problem, current or params.get(TASK) or None, statuses))

    async def _with_reported_errors(self, ws: Workspace, problem: str | None) -> str | None:
        """Add what the agent's program itself reported, when it can be reached."""
        driver = driver_for(self.client, ws, self.slugs)
        if driver is None:
            return problem
        try:
            reported = (await driver.reported_errors(self.settings.agent_error_wait_s))[-3:]
        except (ce.CoderError, DriverError):
            return problem
        if not reported:
            return problem
        who = "AgentAPI" if driver.kind == "agentapi" else "The runner"
        return " ".join(filter(None, [problem, f"{who} reported: " + "; ".join(reported)]))

    async def _statuses(self, ws: Workspace) -> list[WorkspaceAppStatus]:
        """The driver app's statuses, newest first, from the newest start build that has them."""
        for agent in ws.latest_build.agents:
            for app in agent.apps:
                if app.slug in self.slugs.all():
                    return list(app.statuses)
        for build in await self.client.builds(ws.id):
            if build.transition == "start" and build.status != "pending":
                full = await self.client.build(build.id)
                for agent in full.agents:
                    for app in agent.apps:
                        if app.slug in self.slugs.all():
                            return list(app.statuses)
        return []

    async def history(self, name: str, page: int, page_size: int) -> TaskHistory:
        ws, _ = await self._find(name)
        statuses = await self._statuses(ws)
        start, end, size, pages = paginate(len(statuses), page, page_size)
        tasks = [Task(message=s.message, uri=s.uri, state=s.state, created_at=iso(s.created_at) or "",
                      needs_user_attention=needs_attention(statuses, i))
                 for i, s in enumerate(statuses)][start:end]
        return TaskHistory(tasks=tasks, total_count=len(statuses), page=page, page_size=size, total_pages=pages)

    async def log(self, name: str, page: int, page_size: int) -> AgentLog:
        ws = await self._workspace(name)
        driver = self._driver(ws)
        params, (live, unreachable), messages = await asyncio.gather(
            self._params(ws), self._live(driver), _quietly(driver.conversation()) if driver else _none())
        if live is None or messages is None:
            status, problem = live_status(Snapshot(ws, params, live, unreachable), self.slugs)
            raise bad_request(f"Agent {name!r} is {status}; its log is readable while it runs."
                              + (f" {problem}" if problem else ""), status=status)
        newest_first = list(reversed(messages))
        start, end, size, pages = paginate(len(newest_first), page, page_size)
        items = [LogMessage(id=m.id, role=m.role, content=m.content[:LOG_MESSAGE_CHARS],
                            truncated=len(m.content) > LOG_MESSAGE_CHARS, time=iso(m.time))
                 for m in newest_first[start:end]]
        return AgentLog(messages=items, total_count=len(newest_first), page=page, page_size=size, total_pages=pages)

    # --- creating and deleting --------------------------------------------------------------

    async def create(self, name: str, project: str, role: str, spec: str) -> CreatedAgent:
        check_name(name)
        check_text("spec", spec)
        try:
            template, params = await self.catalog.project(project)
        except FleetError as exc:
            raise bad_request(exc.message, **(exc.details or {})) from None
        choices = await self.catalog.role_choices(template, params)
        choice = next((c for c in choices if c.role.name == role), None)
        if choice is None:
            raise bad_request(f"Project {template.name!r} has no role {role[:40]!r}.",
                              roles=[c.role.name for c in choices])
        values = {MANAGED: "true", ROLE: role, PROJECT: template.name, SPEC: spec, TASK: spec}
        try:
            ws = await self.builds.create(name, template.id, choice.preset_id, values)
        except ce.Conflict:
            # Coder's own answer when the name is taken (case-insensitively), by an agent or anything else.
            raise bad_request(f"An agent or workspace named {name!r} already exists.", name=name) from None
        agent = _agent(ws, values, "busy", None, spec, [])
        agent.workspace_status = ws.latest_build.status or "pending"
        return CreatedAgent(agent=agent, message=f"Agent {name!r} created; its workspace is being built and it "
                            "starts on its spec as soon as it is up.")

    async def delete(self, name: str) -> DeleteResult:
        ws, _ = await self._find(name)
        await self.builds.delete(ws)
        return DeleteResult(message=f"Agent {name!r} is being deleted.",
                            deleted_agent=DeletedAgent(name=ws.name, workspace_id=ws.id))

    # --- tasks ------------------------------------------------------------------------------

    async def start_task(self, name: str, description: str) -> TaskResult:
        check_text("task_description", description)
        _, driver, live = await self._ready(name)
        if live.state == "working":
            raise conflict(f"Agent {name!r} already has a running task.", status="busy")
        try:
            await driver.send(description)
        except Busy:
            raise conflict(f"Agent {name!r} already has a running task.", status="busy") from None
        except Unreachable as exc:
            raise bad_request(f"Agent {name!r} is offline: {exc}") from None
        task = Task(message=description, uri="", state="working", needs_user_attention=False,
                    created_at=_now())
        return TaskResult(task=task, agent_status="busy", message=f"Task sent to agent {name!r}.")

    async def cancel_task(self, name: str) -> TaskResult:
        ws, driver, live = await self._ready(name)
        if live.state != "working" and live.can_interrupt:
            raise bad_request(f"Agent {name!r} is idle: there is no running task to cancel.", status="idle")
        try:
            await driver.interrupt()
        except Unreachable as exc:
            raise bad_request(f"Agent {name!r} is offline: {exc}") from None
        except NotSupported as exc:
            raise bad_request(f"Agent {name!r} cannot be interrupted: {exc}", driver=driver.kind) from None

        async def stopped() -> bool | None:
            return True if (await driver.live()).state != "working" else None

        settled = await poll_until(stopped, timeout_s=self.settings.cancel_wait_s,
                                   interval_s=self.settings.poll_interval_s)
        statuses = await self._statuses(await self.client.workspace(ws.id))
        last = statuses[0] if statuses else None
        task = Task(message=(last.message if last and last.message else "Task") + " - canceled",
                    uri=last.uri if last else "", state="idle", needs_user_attention=False, created_at=_now())
        message = "Task canceled." if settled else "Interrupt sent; the agent has not stopped yet."
        return TaskResult(task=task, agent_status="idle" if settled else "busy", message=message)


def _agent(ws: Workspace, params: dict[str, str], status: str, problem: str | None, current: str | None,
           statuses: list[WorkspaceAppStatus]) -> Agent:
    pr = next((s.uri for s in statuses if s.uri and PR_LINK.match(s.uri)), None)
    project = params.get(PROJECT) or ws.template_name
    return Agent(
        name=ws.name, workspace_id=ws.id, status=status, workspace_status=ws.latest_build.status,  # type: ignore[arg-type]
        role=params.get(ROLE, ""), project=project, spec=params.get(SPEC, ""), current_task=current,
        created_at=iso(ws.created_at) or "", updated_at=iso(ws.updated_at or ws.created_at) or "", problem=problem,
        metadata=Metadata(fleet_mcp_agent_name=ws.name, fleet_mcp_role=params.get(ROLE, ""), fleet_mcp_project=project,
                          fleet_mcp_agent_spec=params.get(SPEC, ""), fleet_mcp_current_task=current,
                          fleet_mcp_pull_request_url=pr))


async def _quietly(call: Awaitable[list[Message]]) -> list[Message] | None:
    """A read whose failure only leaves a detail out of the answer."""
    try:
        return await call
    except (ce.AppProxyError, DriverError):
        return None


async def _none() -> None:
    return None


def _now() -> str:
    return iso(datetime.now(UTC)) or ""
