"""The fleet: finding and describing agents. Decides; never speaks HTTP itself.

Everything the fleet knows lives in Coder (workspaces, build parameters, app
statuses) and in each workspace's driver, so two servers pointed at one Coder
see one fleet, and a restarted server re-adopts every agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

from ..coder import errors as ce
from ..coder.client import CoderClient
from ..coder.schemas import Workspace, WorkspaceAppStatus, WorkspaceBuild
from ..drivers import (
    Driver,
    DriverError,
    Live,
    Message,
    Slugs,
    Unkeyed,
    Unreachable,
    driver_app,
    driver_for,
    same_reach,
)
from ..drivers.keys import SECRET_SETTING, KeyProblem, key_of
from ..errors import FleetError, bad_request, not_found, unavailable
from ..models import AgentList, AgentLog, AgentSummary, LogMessage, Projects, Roles, ShownAgent, Task, TaskHistory
from ..settings import Settings
from ..times import iso
from .answers import agent_answer, facts, last_activity, with_screen_prompt
from .asks import confirmed_all, marked, read_idle
from .builds import Builds
from .projects import Catalog
from .reads import nothing, own_problem, prefetch, quietly
from .rules import FLEET_QUERY, LIST_TASK_CHARS, LOG_MESSAGE_CHARS, MANAGED, RUNNER_KEY, TASK, paginate, valid_name
from .status import (
    RUNNER_PROMPT_URI,
    Ready,
    Snapshot,
    base_status,
    list_status,
    live_status,
    needs_attention,
    reported_task,
)

__all__ = ["Fleet", "why_unreachable"]

PARAMS_KEPT = 4096  # builds whose parameters are remembered, ~1 KB each
READY_KEPT = 1_000  # agents whose driver is remembered between reads


def why_unreachable(exc: Unreachable) -> str:
    """Why a driver could not be asked, as text; a `KeyProblem` when this server's key is what failed."""
    return KeyProblem(exc) if isinstance(exc, Unkeyed) else str(exc)


class Fleet:
    """Finds and describes the token user's agents. One per server (per Coder user)."""

    def __init__(self, client: CoderClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.slugs = Slugs(runner=settings.runner_app_slug, agentapi=settings.agentapi_app_slug)
        self.catalog = Catalog(client, settings.template_cache_s)
        self.builds = Builds(client, settings)
        self._params: dict[str, dict[str, str]] = {}
        self._ready: dict[str, Driver] = {}  # by lower-case name: how each agent last seen ready is reached
        self._taken: dict[str, str] = {}  # by workspace id: its newest app status when its runner took a task
        # What runner keys are derived from (drivers/keys.py); never logged, redacted where the server writes.
        self.runner_secret = settings.runner_secret.get_secret_value() if settings.runner_secret else None

    # --- projects and roles -------------------------------------------------------

    async def projects(self, *, deadline: float | None) -> Projects:
        return await self.catalog.projects(deadline=deadline)

    async def roles(self, project: str, *, deadline: float | None) -> Roles:
        return await self.catalog.roles(project, deadline=deadline)

    # --- finding an agent -----------------------------------------------------------

    async def workspace(self, name: str, *, deadline: float | None) -> Workspace:
        """The token user's workspace of that name (not yet known to be an agent). Every method that asks
        Coder or a driver takes the call's `deadline` (loop time; `polling`)."""
        if not valid_name(name):
            raise not_found(f"No agent named {name[:40]!r}.", agent_name=name[:40])
        try:
            return await self.client.workspace_by_name("me", name, deadline=deadline)
        except (ce.NotFound, ce.Gone):
            raise not_found(f"No agent named {name!r}.", agent_name=name) from None

    async def params(self, ws: Workspace, *, deadline: float | None) -> dict[str, str]:
        """Its build parameters, once the fleet's marker is confirmed among them."""
        build = ws.latest_build.id
        params = self._params.get(build)
        if params is None:
            # A build's parameters are fixed when it is created: kept by build id, asked once per build.
            params = {p.name: p.value for p in await self.client.build_parameters(build, deadline=deadline)}
            if len(self._params) >= PARAMS_KEPT:
                del self._params[next(iter(self._params))]
            self._params[build] = params
        if params.get(MANAGED, "").lower() != "true":
            # Someone's own workspace, even of a fleet template: never shown, never touched.
            raise not_found(f"No agent named {ws.name!r}.", agent_name=ws.name)
        return params

    async def find(self, name: str, *, deadline: float | None) -> tuple[Workspace, dict[str, str]]:
        """The token user's fleet workspace of that name, with its build parameters, marker confirmed."""
        ws = await self.workspace(name, deadline=deadline)
        return ws, await self.params(ws, deadline=deadline)

    def driver(self, ws: Workspace | Snapshot) -> Driver | None:
        """The driver of a workspace whose agent is up, else None. A runner's key is a build parameter: read
        `params` (or use `keyed_driver`) first, or its calls go without it and are refused."""
        snap = ws if isinstance(ws, Snapshot) else Snapshot.of(ws, self.slugs)
        return self._driver_of(snap) if isinstance(base_status(snap), Ready) else None

    def _driver_of(self, snap: Snapshot) -> Driver | None:
        ws, app = snap.workspace, snap.app
        if app is None or snap.kind is None:
            return None
        key, locked = key_of(self._params.get(ws.latest_build.id, {}).get(RUNNER_KEY), self.runner_secret,
                             ws.owner_id)
        return driver_for(self.client, ws, snap.agent, app, snap.kind, key=key, locked=locked)

    def _runner_unkeyed(self, snap: Snapshot) -> bool:
        return snap.kind == "runner" and snap.workspace.latest_build.id not in self._params

    async def keyed_driver(self, snap: Snapshot, *, deadline: float | None) -> Driver | None:
        """`driver`, with the runner's key read first where it is not known yet (one request per build)."""
        if self._runner_unkeyed(snap):
            await self.params(snap.workspace, deadline=deadline)
        return self.driver(snap)

    def remember(self, name: str, driver: Driver | None) -> None:
        """What a fleet agent was last seen to be reached by (None: not ready), so the next read of it can ask
        its driver along with Coder instead of after."""
        key = name.lower()
        if driver is None:
            self._ready.pop(key, None)
        elif key in self._ready or len(self._ready) < READY_KEPT:
            self._ready[key] = driver

    def remembered(self, name: str) -> Driver | None:
        return self._ready.get(name.lower())

    def took_task(self, ws: Workspace) -> None:
        """`ws`'s runner took a task: its statuses reach Coder later (Coder's CLI queues them), so until Coder
        holds a newer one than now, a list asks the runner whether it is idle (`lags`)."""
        if ws.id in self._taken or len(self._taken) < READY_KEPT:
            self._taken[ws.id] = ws.latest_app_status.id if ws.latest_app_status else ""

    def lags(self, ws: Workspace) -> bool:
        """Whether Coder holds no app status of `ws` newer than when its runner last took a task (`took_task`)."""
        if (taken := self._taken.get(ws.id)) is None:
            return False
        if taken != (ws.latest_app_status.id if ws.latest_app_status else ""):
            del self._taken[ws.id]
            return False
        return True

    async def live(self, driver: Driver | None, *, deadline: float | None) -> tuple[Live | None, str | None]:
        """(the driver's live state, or why it could not be had)."""
        if driver is None:
            return None, None
        try:
            return await driver.live(deadline=deadline), None
        except Unreachable as exc:
            return None, why_unreachable(exc)

    async def snapshot(self, name: str, *, conversation: bool = False,
                       deadline: float | None) -> tuple[Snapshot, list[Message] | None]:
        """The agent: its workspace, then parameters (asked once per build) ∥ live state ∥ conversation. For an
        agent last seen ready, its driver is asked along with the workspace at the address it had: one round
        trip, its answers used only if the workspace still says that address and confirms a fleet agent."""
        known = self.remembered(name)
        early: dict[str, Awaitable[Any]] = {} if known is None else {
            "live": self.live(known, deadline=deadline),
            "conversation": quietly(known.conversation(deadline=deadline)) if conversation else nothing()}
        with prefetch(early) as begun:
            ws = await self.workspace(name, deadline=deadline)
            seen = Snapshot.of(ws, self.slugs)
            if self._runner_unkeyed(seen):
                await self.params(ws, deadline=deadline)  # the runner's key is a build parameter: read first
            driver = self._driver_of(seen)
            ready = driver if isinstance(base_status(seen), Ready) else None
            if begun and same_reach(known, ready):
                reads: tuple[Awaitable[Any], ...] = (begun["live"], begun["conversation"])
            else:
                reads = (self.live(ready, deadline=deadline),
                         quietly(ready.conversation(deadline=deadline)) if ready and conversation else nothing())
            params, (live, unreachable), messages = await asyncio.gather(self.params(ws, deadline=deadline), *reads)
            self.remember(ws.name, ready)
            return replace(seen, params=params, live=live, unreachable=unreachable, driver=driver), messages

    def not_ready(self, snap: Snapshot, what: str = "not ready for work") -> FleetError:
        if isinstance(snap.unreachable, KeyProblem):  # this server's setting, not the agent: say which
            return unavailable(f"Agent {snap.workspace.name!r} cannot be reached by this server: {snap.unreachable}",
                               setting=SECRET_SETTING)
        status = live_status(snap)
        hint = " start_agent starts it again." if status.value in ("stopped", "canceled") else ""
        return bad_request(f"Agent {snap.workspace.name!r} is {status.value}, {what}."
                           + (f" {status.problem}" if status.problem else "") + hint, status=status.value)

    async def ready(self, name: str, *, deadline: float | None) -> tuple[Workspace, Driver, Live]:
        """An agent whose driver answers, for an operation on its conversation; `bad_request` otherwise."""
        ws, params = await self.find(name, deadline=deadline)
        driver = self.driver(ws)  # `find` read the parameters, the runner's key among them
        live, unreachable = await self.live(driver, deadline=deadline)
        if driver is None or live is None:
            raise self.not_ready(Snapshot.of(ws, self.slugs, params, live, unreachable))
        return ws, driver, live

    # --- describing -------------------------------------------------------------------

    async def list_agents(self, status: str | None = None, project: str | None = None, *,
                          deadline: float | None) -> AgentList:
        # A big listing is parsed with the collector held off until this task yields (`coder.answers`): it is
        # summarised and dropped before any collection walks it.
        page = await self.client.workspaces(FLEET_QUERY, deadline=deadline)
        listed = [(ws, self._summary(ws)) for ws in page.workspaces
                  if not project or project.lower() in (ws.template_name.lower(), ws.template_display_name.lower())]
        del page
        # A runner's prompt, and whether one waits, come from the runner, never from the listing's mark; and
        # whether it is idle, while Coder has not caught up with a task it took here (asks.py).
        seen = [Snapshot.of(ws, self.slugs) for ws, s in listed if s.status_source == "app status" and (
            s.status == "needs_input" or (s.status == "idle" and self.lags(ws)))]
        asked = [(snap, list_status(snap)) for snap in seen]
        now = {snap.workspace.id: found for (snap, _), found in zip(asked, await confirmed_all(
            self, asked, deadline=deadline, which=lambda snap, st: marked(snap, st) or read_idle(snap, st)),
            strict=True)}
        agents = [s.model_copy(update=facts(now[ws.id])) if ws.id in now else s for ws, s in listed]
        agents = [s for s in agents if not status or s.status == status]
        return AgentList(agents=agents, total_count=len(agents))

    def _summary(self, ws: Workspace) -> AgentSummary:
        where = ws.latest_build.status or "pending"
        try:
            seen = Snapshot.of(ws, self.slugs)
            task = reported_task(seen) or self._params.get(ws.latest_build.id, {}).get(TASK)
            return AgentSummary(name=ws.name, project=ws.template_name, workspace_status=where,
                                last_activity_at=iso(last_activity(ws)),
                                current_task=task[:LIST_TASK_CHARS] if task else None,
                                **facts(list_status(seen)))
        except Exception as exc:  # noqa: BLE001 - one agent's reports cost its own entry, not the list
            return AgentSummary(name=ws.name, project=ws.template_name, status="unknown", workspace_status=where,
                                status_source="app status", current_task=None,
                                problem=own_problem(ws.name, exc).message)

    async def show(self, name: str, *, deadline: float | None) -> ShownAgent:
        """The agent now: one snapshot (with its driver), its app statuses, and, when it failed or is offline
        while its workspace runs, what its program itself reported."""
        snap, messages = await self.snapshot(name, conversation=True, deadline=deadline)
        status = with_screen_prompt(live_status(snap), snap.driver, messages)
        problem = await self._with_reported_errors(snap, status.problem, deadline) if (
            status.value in ("failed", "offline") and snap.workspace.latest_build.status == "running") else None
        statuses = await self.statuses(snap.workspace, deadline=deadline)
        asked = next((m.content for m in reversed(messages or []) if m.role == "user"), None) if snap.live else None
        current = asked or reported_task(snap) or snap.params.get(TASK) or None
        return ShownAgent(agent=agent_answer(snap.workspace, snap.params, status, current, statuses, problem=problem,
                                             driver=snap.driver, live=snap.live))

    async def _with_reported_errors(self, snap: Snapshot, problem: str | None, deadline: float | None) -> str | None:
        """Add what the agent's program itself reported, when it can be reached."""
        driver = snap.driver
        if driver is None:
            return problem
        try:
            reported = (await driver.reported_errors(self.settings.agent_error_wait_s, deadline=deadline))[-3:]
        except (ce.CoderError, DriverError):
            return problem
        if not reported:
            return problem
        who = "AgentAPI" if driver.kind == "agentapi" else "The runner"
        return " ".join(filter(None, [problem, f"{who} reported: " + "; ".join(reported)]))

    async def statuses(self, ws: Workspace, *, deadline: float | None) -> list[WorkspaceAppStatus]:
        """The driver app's statuses, newest first, from the newest start build that has them."""
        found = self._statuses_of(ws.latest_build)
        if found is not None:
            return found
        # Stopped or building: the history stays on a start build.
        for build in await self.client.builds(ws.id, deadline=deadline):
            if build.transition == "start" and build.status != "pending":
                found = self._statuses_of(await self.client.build(build.id, deadline=deadline))
                if found is not None:
                    return found
        return []

    def _statuses_of(self, build: WorkspaceBuild) -> list[WorkspaceAppStatus] | None:
        app = next((a for agent in build.agents if (a := driver_app(agent, self.slugs))), None)
        return list(app.statuses) if app is not None else None

    async def history(self, name: str, page: int, page_size: int, *, deadline: float | None) -> TaskHistory:
        ws, _ = await self.find(name, deadline=deadline)
        statuses = await self.statuses(ws, deadline=deadline)
        # The runner's prompt marker is the fleet's own wire (`pending` tells the prompt), not a link to show.
        tasks = [Task(message=s.message, uri="" if s.uri.startswith(RUNNER_PROMPT_URI) else s.uri, state=s.state,
                      created_at=iso(s.created_at) or "",
                      needs_user_attention=needs_attention(statuses, i))
                 for i, s in enumerate(statuses) if not _ends_same_turn(statuses, i)]
        start, end, size, pages = paginate(len(tasks), page, page_size)
        return TaskHistory(tasks=tasks[start:end], total_count=len(tasks), page=page, page_size=size,
                           total_pages=pages)

    async def log(self, name: str, page: int, page_size: int, *, deadline: float | None) -> AgentLog:
        snap, messages = await self.snapshot(name, conversation=True, deadline=deadline)
        if snap.live is None or messages is None:
            raise self.not_ready(snap, "its log is readable while it runs")
        newest_first = list(reversed(messages))
        start, end, size, pages = paginate(len(newest_first), page, page_size)
        items = [LogMessage(id=m.id, role=m.role, content=m.content[:LOG_MESSAGE_CHARS],
                            truncated=len(m.content) > LOG_MESSAGE_CHARS, time=iso(m.time))
                 for m in newest_first[start:end]]
        return AgentLog(messages=items, total_count=len(newest_first), page=page, page_size=size, total_pages=pages)


def _ends_same_turn(statuses: list[WorkspaceAppStatus], i: int) -> bool:
    """An `idle` repeating the `complete` or `failure` just before it: one turn's end, told twice (so the
    agent's reporter says the agent waits), shown once."""
    status, older = statuses[i], statuses[i + 1] if i + 1 < len(statuses) else None
    return (status.state == "idle" and older is not None and older.state in ("complete", "failure")
            and (status.message, status.uri) == (older.message, older.uri))
