"""The fleet: agents, projects and roles on top of Coder. Decides; never speaks HTTP.

Everything the fleet knows lives in Coder (workspaces, their build parameters,
app statuses) and in each workspace's AgentAPI, so two servers pointed at one
Coder see one fleet, and a restarted server re-adopts every agent.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from .coder import errors as ce
from .coder.client import CoderClient
from .coder.schemas import RichParameter, Template, Workspace, WorkspaceAgent, WorkspaceApp, WorkspaceAppStatus
from .models import (
    Agent, AgentList, AgentLog, AgentSummary, CreatedAgent, DeletedAgent, DeleteResult, FleetError, LogMessage,
    Metadata, Project, Projects, Role, Roles, ShownAgent, Task, TaskHistory, TaskResult,
)
from .rules import (
    BUILD_ACTIVE, ESC, FLEET_PARAMETERS, FLEET_QUERY, LIST_TASK_CHARS, LOG_MESSAGE_CHARS, MANAGED, NAME_RE, PR_LINK,
    PROJECT, ROLE, SPEC, TASK, check_name, check_text, iso, needs_attention, paginate,
)
from .settings import Settings

__all__ = ["Fleet"]

ADOPT_ATTEMPTS = 4  # looks for a workspace whose create answer was lost


class Fleet:
    """The fleet's operations. One instance per server, over one `CoderClient`."""

    def __init__(self, client: CoderClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.slug = settings.agentapi_app_slug
        self._username: str | None = None

    async def username(self) -> str:
        # App-proxy paths need the real username (`@me` is refused there).
        if self._username is None:
            self._username = (await self.client.me()).username
        return self._username

    # --- projects and roles -------------------------------------------------

    async def _fleet_templates(self) -> list[tuple[Template, list[RichParameter]]]:
        templates = await self.client.templates()
        params = await asyncio.gather(*(self.client.rich_parameters(t.active_version_id) for t in templates))
        return [(t, p) for t, p in zip(templates, params, strict=True)
                if set(FLEET_PARAMETERS) <= {x.name for x in p}]

    async def projects(self) -> Projects:
        return Projects(projects=[
            Project(name=t.name, display_name=t.display_name or t.name, description=t.description,
                    template_id=t.id, template_name=t.name)
            for t, _ in await self._fleet_templates()])

    async def _project(self, name: str) -> tuple[Template, list[RichParameter]]:
        wanted = name.strip().lower()
        found = [(t, p) for t, p in await self._fleet_templates()
                 if wanted in (t.name.lower(), (t.display_name or "").lower())]
        if not found:
            raise FleetError("not_found", f"No project named {name[:80]!r}. list_agent_projects shows the projects.",
                             {"project": name[:80]})
        if len(found) > 1:
            raise FleetError("bad_request", f"Project {name[:80]!r} is ambiguous; use the template name.",
                             {"candidates": [t.name for t, _ in found]})
        return found[0]

    async def _roles(self, template: Template, params: list[RichParameter]) -> list[tuple[Role, str | None]]:
        """Roles with the preset id that sets each (None when roles come from the parameter's options)."""
        option = {o.value: o for p in params if p.name == ROLE for o in p.options}
        presets = await self.client.presets(template.active_version_id)
        roles = []
        for preset in presets:
            value = next((x.value for x in preset.parameters if x.name == ROLE), None)
            if value is None:
                continue
            opt = option.get(value)
            roles.append((Role(name=value, display_name=opt.name if opt else preset.name,
                               description=preset.description or (opt.description if opt else "")), preset.id))
        if roles:
            return roles
        return [(Role(name=o.value, display_name=o.name or o.value, description=o.description), None)
                for o in option.values()]

    async def roles(self, project: str) -> Roles:
        template, params = await self._project(project)
        return Roles(roles=[role for role, _ in await self._roles(template, params)])

    # --- agents: finding and describing --------------------------------------

    async def _find(self, name: str) -> tuple[Workspace, dict[str, str]]:
        """The token user's fleet workspace of that name, with its build parameters."""
        if not name or len(name) > 32 or not NAME_RE.match(name):
            raise FleetError("not_found", f"No agent named {name[:40]!r}.", {"agent_name": name[:40]})
        try:
            ws = await self.client.workspace_by_name("me", name)
        except (ce.NotFound, ce.Gone):
            raise FleetError("not_found", f"No agent named {name!r}.", {"agent_name": name}) from None
        params = {p.name: p.value for p in await self.client.build_parameters(ws.latest_build.id)}
        if params.get(MANAGED, "").lower() != "true":
            # Someone's own workspace, even of a fleet template: never shown, never touched.
            raise FleetError("not_found", f"No agent named {name!r}.", {"agent_name": name})
        return ws, params

    def _agent_and_app(self, ws: Workspace) -> tuple[WorkspaceAgent | None, WorkspaceApp | None]:
        agents = ws.latest_build.agents
        agent = agents[0] if agents else None
        app = next((a for a in agent.apps if a.slug == self.slug), None) if agent else None
        return agent, app

    def _base_status(self, ws: Workspace) -> tuple[str, str | None]:
        """Status from build, agent and app alone; `ready` means AgentAPI decides busy/idle."""
        build = ws.latest_build
        if build.status == "failed":
            return "failed", build.job.error or "The workspace build failed."
        if build.status != "running":
            return build.status or "pending", None
        agent, app = self._agent_and_app(ws)
        if agent is None or agent.status == "connecting" or agent.lifecycle_state in ("created", "starting", ""):
            return "starting", None
        if agent.status in ("disconnected", "timeout"):
            return "offline", f"The workspace agent is {agent.status}."
        if agent.lifecycle_state in ("start_error", "start_timeout"):
            return "failed", agent.health.reason or f"The agent's startup scripts ended in {agent.lifecycle_state}."
        if app is None:
            return "offline", f"The workspace has no app {self.slug!r}: its template lacks the AgentAPI app."
        if app.health == "initializing":
            return "starting", None
        if app.health == "unhealthy":
            return "offline", "AgentAPI does not answer its health check."
        return "ready", None

    def _fresh_status(self, ws: Workspace) -> WorkspaceAppStatus | None:
        # Coder ignores a latest_app_status older than the latest start build.
        status = ws.latest_app_status
        created = ws.latest_build.created_at
        if status and status.created_at and created and status.created_at < created:
            return None
        return status

    def _list_status(self, ws: Workspace) -> str:
        status, _ = self._base_status(ws)
        if status != "ready":
            return status
        # Only AgentAPI going stable makes the reporter say `idle`; `complete` or
        # `failure` come just before it, while the agent is still winding down.
        fresh = self._fresh_status(ws)
        return "idle" if fresh is None or fresh.state == "idle" else "busy"

    async def list(self, status: str | None = None, project: str | None = None) -> AgentList:
        page = await self.client.workspaces(FLEET_QUERY)
        agents = []
        for ws in page.workspaces:
            fresh = self._fresh_status(ws)
            summary = AgentSummary(name=ws.name, status=self._list_status(ws), project=ws.template_name,
                                   current_task=fresh.message[:LIST_TASK_CHARS] if fresh and fresh.message else None)
            if status and summary.status != status:
                continue
            if project and project.lower() not in (ws.template_name.lower(), ws.template_display_name.lower()):
                continue
            agents.append(summary)
        return AgentList(agents=agents, total_count=len(agents))

    async def _statuses(self, ws: Workspace) -> list[WorkspaceAppStatus]:
        """The AgentAPI app's statuses, newest first, from the newest start build that has them."""
        _, app = self._agent_and_app(ws)
        if app is not None:
            return list(app.statuses)
        for build in await self.client.builds(ws.id):
            if build.transition == "start" and build.status != "pending":
                full = await self.client.build(build.id)
                for agent in full.agents:
                    for candidate in agent.apps:
                        if candidate.slug == self.slug:
                            return list(candidate.statuses)
        return []

    async def _live(self, ws: Workspace) -> tuple[str, str | None, object | None]:
        """(status, problem, AgentAPI status) asking AgentAPI when the workspace is ready."""
        status, problem = self._base_status(ws)
        if status != "ready":
            return status, problem, None
        agent, _ = self._agent_and_app(ws)
        try:
            live = await self.client.agent_status(await self.username(), ws.name, agent.name if agent else None)
        except (ce.WorkspaceOffline, ce.AppUnavailable) as exc:
            return "offline", f"AgentAPI cannot be reached: {exc.message}", None
        except ce.AppNotFound:
            return "offline", f"The workspace has no app {self.slug!r}: its template lacks the AgentAPI app.", None
        except ce.PathAppsDisabled:
            raise FleetError("unavailable", "Path-based apps are disabled on this Coder deployment; AgentAPI "
                             "can only be reached through subdomain apps.") from None
        return ("busy" if live.status == "running" else "idle"), None, live

    async def _agent(self, ws: Workspace, params: dict[str, str]) -> Agent:
        status, problem, _ = await self._live(ws)
        if status in ("failed", "offline") and ws.latest_build.status == "running":
            problem = await self._with_agent_errors(ws, problem)
        statuses = await self._statuses(ws)
        current = None
        if status in ("busy", "idle"):
            try:
                messages = await self.client.agent_messages(await self.username(), ws.name)
                current = next((m.content for m in reversed(messages) if m.role == "user"), None)
            except ce.AppProxyError:
                pass
        if current is None and statuses and statuses[0].message:
            current = statuses[0].message
        current = current or params.get(TASK) or None
        pr = next((s.uri for s in statuses if s.uri and PR_LINK.match(s.uri)), None)
        return Agent(
            name=ws.name, workspace_id=ws.id, status=status, workspace_status=ws.latest_build.status,
            role=params.get(ROLE, ""), project=params.get(PROJECT) or ws.template_name, spec=params.get(SPEC, ""),
            current_task=current, created_at=iso(ws.created_at), updated_at=iso(ws.updated_at or ws.created_at),
            problem=problem, metadata=Metadata(
                fleet_mcp_agent_name=ws.name, fleet_mcp_role=params.get(ROLE, ""),
                fleet_mcp_project=params.get(PROJECT) or ws.template_name, fleet_mcp_agent_spec=params.get(SPEC, ""),
                fleet_mcp_current_task=current, fleet_mcp_pull_request_url=pr))

    async def _with_agent_errors(self, ws: Workspace, problem: str | None) -> str | None:
        """Add what AgentAPI itself reported (`agent_error` events), when it can be reached."""
        agent, _ = self._agent_and_app(ws)
        try:
            errors = await self.client.agent_errors(await self.username(), ws.name, agent.name if agent else None,
                                                    wait=self.settings.agent_error_wait_s)
        except ce.CoderError:
            return problem
        reported = [e.message for e in errors if e.message][-3:]
        if not reported:
            return problem
        return " ".join(filter(None, [problem, "AgentAPI reported: " + "; ".join(reported)]))

    async def show(self, name: str) -> ShownAgent:
        ws, params = await self._find(name)
        return ShownAgent(agent=await self._agent(ws, params))

    # --- agents: creating and deleting ----------------------------------------

    async def create(self, name: str, project: str, role: str, spec: str) -> CreatedAgent:
        check_name(name)
        check_text("spec", spec)
        try:
            template, params = await self._project(project)
        except FleetError as exc:
            raise FleetError("bad_request", exc.message, exc.details) from None
        roles = await self._roles(template, params)
        preset_id = next((pid for r, pid in roles if r.name == role), "missing")
        if preset_id == "missing":
            raise FleetError("bad_request", f"Project {template.name!r} has no role {role[:40]!r}.",
                             {"roles": [r.name for r, _ in roles]})
        if await self._exists(name):
            raise FleetError("bad_request", f"An agent or workspace named {name!r} already exists.", {"name": name})
        values = {MANAGED: "true", ROLE: role, PROJECT: template.name, SPEC: spec, TASK: spec}
        try:
            ws = await self.client.create_workspace("me", name=name, template_id=template.id,
                                                    preset_id=preset_id, parameters=values)
        except ce.Conflict:
            raise FleetError("bad_request", f"An agent or workspace named {name!r} already exists.",
                             {"name": name}) from None
        except (ce.Unavailable, ce.ServerError):
            # The request may have landed: look before answering, never create twice.
            ws = await self._adopt_after_failure(name)
        agent = Agent(
            name=ws.name, workspace_id=ws.id, status="busy", workspace_status=ws.latest_build.status or "pending",
            role=role, project=template.name, spec=spec, current_task=spec, created_at=iso(ws.created_at),
            updated_at=iso(ws.updated_at or ws.created_at), metadata=Metadata(
                fleet_mcp_agent_name=ws.name, fleet_mcp_role=role, fleet_mcp_project=template.name,
                fleet_mcp_agent_spec=spec, fleet_mcp_current_task=spec))
        return CreatedAgent(agent=agent, message=f"Agent {name!r} created; its workspace is being built and it "
                            "starts on its spec as soon as it is up.")

    async def _exists(self, name: str) -> bool:
        try:
            await self.client.workspace_by_name("me", name)
        except ce.NotFound:
            return False
        return True

    async def _adopt_after_failure(self, name: str) -> Workspace:
        """After an ambiguous failure (no answer, 5xx), the workspace may exist or be about to.

        Look for it a few times before answering, and never send the create again:
        a second request could only make a second workspace or a false conflict.
        """
        for attempt in range(ADOPT_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self.settings.poll_interval_s)
            try:
                ws, _ = await self._find(name)
                return ws
            except (FleetError, ce.CoderError):
                continue
        raise FleetError("unavailable", "Coder did not confirm the new workspace and it cannot be found; "
                         "nothing was created. Try again.", {"name": name})

    async def delete(self, name: str) -> DeleteResult:
        ws, _ = await self._find(name)
        done = DeleteResult(message=f"Agent {name!r} is being deleted.",
                            deleted_agent=DeletedAgent(name=ws.name, workspace_id=ws.id))
        build = ws.latest_build
        if build.transition == "delete" and build.status in ("pending", "deleting", "deleted"):
            return done
        if build.job.status in BUILD_ACTIVE:
            await self._stop_build(build.id, ws.id)
        try:
            await self.client.create_build(ws.id, "delete")
        except ce.Conflict:
            await self._wait_idle(ws.id)
            await self.client.create_build(ws.id, "delete")
        return done

    async def _stop_build(self, build_id: str, workspace_id: str) -> None:
        """Cancel an active build where the template allows it; either way wait for it to end."""
        try:
            await self.client.cancel_build(build_id)
        except (ce.Forbidden, ce.BadRequest):
            pass
        await self._wait_idle(workspace_id)

    async def _wait_idle(self, workspace_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.delete_wait_s
        while True:
            ws = await self.client.workspace(workspace_id)
            if ws.latest_build.job.status not in BUILD_ACTIVE:
                return
            if loop.time() >= deadline:
                raise FleetError("unavailable", "The workspace is still busy with a build; try again shortly.",
                                 {"workspace_status": ws.latest_build.status})
            await asyncio.sleep(self.settings.poll_interval_s)

    # --- tasks ----------------------------------------------------------------

    async def _ready(self, name: str) -> tuple[Workspace, object]:
        ws, _ = await self._find(name)
        status, problem, live = await self._live(ws)
        if live is None:
            raise FleetError("bad_request", f"Agent {name!r} is {status}, not ready for work."
                             + (f" {problem}" if problem else ""), {"status": status})
        return ws, live

    async def start_task(self, name: str, description: str) -> TaskResult:
        check_text("task_description", description)
        ws, live = await self._ready(name)
        if live.status == "running":
            raise FleetError("conflict", f"Agent {name!r} already has a running task.", {"status": "busy"})
        try:
            await self.client.agent_send(await self.username(), ws.name, content=description, type="user")
        except ce.AgentBusy:
            raise FleetError("conflict", f"Agent {name!r} already has a running task.", {"status": "busy"}) from None
        except (ce.WorkspaceOffline, ce.AppUnavailable) as exc:
            raise FleetError("bad_request", f"Agent {name!r} is offline: {exc.message}") from None
        task = Task(message=description, uri="", state="working", needs_user_attention=False,
                    created_at=iso(datetime.now(UTC)))
        return TaskResult(task=task, agent_status="busy", message=f"Task sent to agent {name!r}.")

    async def cancel_task(self, name: str) -> TaskResult:
        ws, live = await self._ready(name)
        if live.transport == "acp":
            raise FleetError("bad_request", f"Agent {name!r} speaks AgentAPI's ACP transport, where ESC does not "
                             "interrupt a task; it cannot be cancelled this way.", {"transport": "acp"})
        if live.status != "running":
            raise FleetError("bad_request", f"Agent {name!r} is idle: there is no running task to cancel.",
                             {"status": "idle"})
        owner = await self.username()
        try:
            await self.client.agent_send(owner, ws.name, content=ESC, type="raw")
        except (ce.WorkspaceOffline, ce.AppUnavailable) as exc:
            raise FleetError("bad_request", f"Agent {name!r} is offline: {exc.message}") from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.cancel_wait_s
        status = "busy"
        while loop.time() < deadline:
            if (await self.client.agent_status(owner, ws.name)).status == "stable":
                status = "idle"
                break
            await asyncio.sleep(self.settings.poll_interval_s)
        fresh = await self.client.workspace(ws.id)
        statuses = await self._statuses(fresh)
        last = statuses[0] if statuses else None
        task = Task(message=(last.message if last and last.message else "Task") + " - canceled",
                    uri=last.uri if last else "", state="idle", needs_user_attention=False,
                    created_at=iso(datetime.now(UTC)))
        message = "Task canceled." if status == "idle" else "Interrupt sent; the agent has not stopped yet."
        return TaskResult(task=task, agent_status=status, message=message)

    async def history(self, name: str, page: int, page_size: int) -> TaskHistory:
        ws, _ = await self._find(name)
        statuses = await self._statuses(ws)
        start, end, size, pages = paginate(len(statuses), page, page_size)
        tasks = [Task(message=s.message, uri=s.uri, state=s.state, created_at=iso(s.created_at) or "",
                      needs_user_attention=needs_attention(statuses, i))
                 for i, s in enumerate(statuses)][start:end]
        return TaskHistory(tasks=tasks, total_count=len(statuses), page=page, page_size=size, total_pages=pages)

    async def log(self, name: str, page: int, page_size: int) -> AgentLog:
        ws, _ = await self._find(name)
        status, problem, _ = await self._live(ws)
        if status not in ("busy", "idle"):
            raise FleetError("bad_request", f"Agent {name!r} is {status}; its log is readable while it runs."
                             + (f" {problem}" if problem else ""), {"status": status})
        messages = list(reversed(await self.client.agent_messages(await self.username(), ws.name)))
        start, end, size, pages = paginate(len(messages), page, page_size)
        items = [LogMessage(id=m.id, role=m.role, content=m.content[:LOG_MESSAGE_CHARS],
                            truncated=len(m.content) > LOG_MESSAGE_CHARS, time=iso(m.time))
                 for m in messages[start:end]]
        return AgentLog(messages=items, total_count=len(messages), page=page, page_size=size, total_pages=pages)
