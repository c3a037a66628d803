"""Status rules: pure functions over what Coder and the driver said about an agent. No I/O.

A list sees only workspaces (one Coder request for the whole fleet): builds,
workspace agents, and the app statuses the agent's program reports. A single
agent's answer also has its driver's live state, gathered concurrently into
one `Snapshot`. Every status says where it came from and since when.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, Literal
from urllib.parse import parse_qs

from ..coder.lenient import parse_timestamp
from ..coder.schemas import Workspace, WorkspaceAgent, WorkspaceApp, WorkspaceAppStatus
from ..drivers import Driver, DriverKind, Live, Pending, Slugs, agent_and_app
from ..models import AgentStatus, LastTurn, StatusSource

__all__ = [
    "READY", "RUNNER_PROMPT_URI", "Ready", "Snapshot", "Status", "app_statuses", "base_status", "fresh_app_status",
    "list_status", "live_status", "needs_attention", "reported_task", "runner_prompt", "turn_status", "waits_for",
]

READY: Final = "ready"  # base_status's word for "the driver decides"
UNREPORTED = ("Coder's answer carried no app statuses (a slimmer workspace answer than the fleet reads), so "
              "busy and idle cannot be told apart from it; show_agent asks the agent itself.")
# How the runner marks a pending prompt in an app status (specs/runner.md): the status's `uri`, which only the
# runner sets. A message, which carries the agent's words, never decides a status.
RUNNER_PROMPT_URI = "fleet-runner:needs-input?"
# What Claude Code's own summaries say while a prompt waits on the screen (AgentAPI cannot say it otherwise).
_WAITING = re.compile(r"(?i)permission|approv|confirm|waiting for (your |user )?(input|answer|reply)|question")
_ACTIVE_BUILD = ("pending", "running", "deleting")
# A build that is not running, as an agent's status (Coder's build statuses, but for `running`).
_BUILD_STATUS: dict[str, AgentStatus] = {
    "pending": "pending", "starting": "starting", "stopping": "stopping", "stopped": "stopped", "failed": "failed",
    "canceling": "canceling", "canceled": "canceled", "deleting": "deleting", "deleted": "deleted", "": "pending"}


@dataclass(frozen=True)
class Status:
    """An agent's status, why (when it is bad), where it was read and since when."""

    value: AgentStatus
    problem: str | None = None
    source: StatusSource = "build"
    since: datetime | None = None
    last_turn: LastTurn | None = None  # once a turn has ended
    last_turn_error: str | None = None
    pending: Pending | None = None  # what a needs_input agent waits on, when known


@dataclass(frozen=True)
class Ready:
    """`base_status` of a workspace whose agent's program is up: its turn (driver or reports) decides."""

    since: datetime | None = None
    value: Literal["ready"] = READY
    problem: None = None
    source: StatusSource = "workspace agent"


@dataclass(frozen=True)
class Snapshot:
    """One agent as gathered for a call: the workspace, its workspace agent and the driver app that agent offers
    (found once, by `of`), its build parameters, its driver and the driver's answer. A list's snapshot is the
    workspace alone."""

    workspace: Workspace
    slugs: Slugs
    agent: WorkspaceAgent | None
    app: WorkspaceApp | None
    params: dict[str, str] = field(default_factory=dict)
    live: Live | None = None
    unreachable: str | None = None  # why the driver could not be asked, when it could not
    driver: Driver | None = None  # how its agent's program is reached (asked only while the workspace is ready)

    @classmethod
    def of(cls, ws: Workspace, slugs: Slugs, params: dict[str, str] | None = None, live: Live | None = None,
           unreachable: str | None = None) -> Snapshot:
        """The snapshot of `ws`: its first workspace agent and that agent's runner or AgentAPI app."""
        agent, app = agent_and_app(ws, slugs)
        return cls(ws, slugs, agent, app, params or {}, live, unreachable)

    @property
    def kind(self) -> DriverKind | None:
        """Which program its app runs, by the app's slug; None when it has neither app."""
        if self.app is None:
            return None
        return "runner" if self.app.slug == self.slugs.runner else "agentapi"


def base_status(snap: Snapshot) -> Status | Ready:
    """The status from the build, the workspace agent and the app alone; `Ready` when the turn decides.
    A new agent holds its spec from the moment it is created: `busy` while its workspace is still being built
    (the contract: create answers busy); `pending` and `starting` are for workspaces with no work waiting."""
    found = _built_status(snap)
    build = snap.workspace.latest_build
    if isinstance(found, Status) and found.value in ("pending", "starting") and build.transition == "start" \
            and build.build_number <= 1:
        return replace(found, value="busy")
    return found


def _built_status(snap: Snapshot) -> Status | Ready:
    build, agent, app, slugs = snap.workspace.latest_build, snap.agent, snap.app, snap.slugs
    built_since = build.updated_at or build.created_at
    if build.transition == "delete" and build.status in _ACTIVE_BUILD:
        return Status("deleting", since=built_since)
    if build.status == "failed":
        return Status("failed", build.job.error or "The workspace build failed.", since=built_since)
    if build.status == "pending" and build.build_number > 1 and build.transition in ("stop", "start"):
        # Queued behind stop_agent or start_agent: already what was asked, as `deleting` is for a delete.
        return Status("stopping" if build.transition == "stop" else "starting", since=built_since)
    if build.status != "running":
        return Status(_BUILD_STATUS.get(build.status, "unknown"), since=built_since)
    if agent is None:
        return Status("starting", since=built_since)
    if agent.status == "connecting" or agent.lifecycle_state in ("created", "starting", ""):
        return Status("starting", source="workspace agent", since=built_since)
    if agent.status in ("disconnected", "timeout"):
        return Status("offline", f"The workspace agent is {agent.status}.", "workspace agent",
                      agent.disconnected_at or agent.last_connected_at)
    if agent.lifecycle_state in ("start_error", "start_timeout"):
        return Status("failed", agent.health.reason or
                      f"The agent's startup scripts ended in {agent.lifecycle_state}.", "workspace agent", built_since)
    if app is None:
        return Status("offline", f"The workspace has no app {slugs.runner!r} or {slugs.agentapi!r}: its template "
                      "lacks the runner or AgentAPI app.", "workspace agent", built_since)
    if app.health == "initializing":
        return Status("starting", source="workspace agent", since=built_since)
    if app.health == "unhealthy":
        program = "The runner" if snap.kind == "runner" else "AgentAPI"
        return Status("offline", f"{program} (app {app.slug!r}) does not answer its health check.",
                      "workspace agent", built_since)
    return Ready(since=built_since)


def fresh_app_status(ws: Workspace) -> WorkspaceAppStatus | None:
    """The workspace's latest app status, unless it predates the latest start build (Coder's own rule)."""
    status = ws.latest_app_status
    build = ws.latest_build
    if status is None:
        return None
    if build.transition == "start" and status.created_at and build.created_at and \
            not status.created_at > build.created_at:
        return None
    return status


def app_statuses(snap: Snapshot) -> list[WorkspaceAppStatus]:
    """The driver app's statuses of the current build, newest first."""
    if snap.app is None:
        return []
    build = snap.workspace.latest_build.created_at
    return [s for s in snap.app.statuses if not (build and s.created_at and not s.created_at > build)]


def reported_task(snap: Snapshot) -> str | None:
    """What the agent last said it works on: its newest `working` report of this build (the runner reports
    each task's first line as it takes it up; on AgentAPI, Claude Code's own words), not how a turn ended."""
    statuses = app_statuses(snap)
    if snap.app is None or not snap.app.statuses:  # a listing without per-app history: its newest report only
        statuses = [fresh] if (fresh := fresh_app_status(snap.workspace)) else []
    return next((s.message for s in statuses if s.state == "working" and s.message), None)


def runner_prompt(status: WorkspaceAppStatus) -> Pending | None:
    """The prompt a runner's needs-input status names in its `uri`, or None (any other status): its id, tool
    and time only, never its input (the agent can post this mark too: `asks` reads the prompt from the runner)."""
    if not status.uri.startswith(RUNNER_PROMPT_URI):
        return None
    fields = {k: v[0] for k, v in parse_qs(status.uri[len(RUNNER_PROMPT_URI):]).items()}
    if not fields.get("prompt"):
        return None
    try:  # the agent's own words: any time it names reads as UTC (or the status's own time)
        asked = parse_timestamp(fields.get("asked_at")) or status.created_at
    except ValueError:
        asked = status.created_at
    return Pending(tool=fields.get("tool", ""), summary="", since=asked, id=fields["prompt"])


def waits_for(pending: Pending) -> str:
    """The `problem` of a needs_input agent; the input is quoted: it is the agent's, not the fleet's."""
    asked = f"prompt {pending.id}: " if pending.id else ""
    said = f"; the agent's input: {pending.summary!r}" if pending.summary else \
        "; its input is read from the agent's program (show_agent)" if pending.input is None else ""
    return f"Waits for an answer to {asked}permission to use {pending.tool}{said}"


def turn_status(statuses: list[WorkspaceAppStatus], runner: bool) -> Status:
    """Where the agent's turn stands, from its app statuses (newest first); `idle` when none was reported.
    A runner's statuses say needs_input only by the runner's own mark (`runner_prompt`), never by their text."""
    if not statuses:
        return Status("idle", source="app status")
    latest = statuses[0]
    if latest.state != "idle":
        # `complete` and `failure` come just before `idle`, while the agent is still winding down.
        return Status("busy", source="app status", since=latest.created_at)
    if runner and (prompt := runner_prompt(latest)) is not None:
        return Status("needs_input", waits_for(prompt), "app status", latest.created_at, pending=prompt)
    ended: LastTurn | None = None
    error, worked = None, False
    for older in statuses[1:]:  # walk back to the previous idle
        if older.state == "idle":
            break
        if older.state in ("complete", "failure") and ended is None:
            ended = "succeeded" if older.state == "complete" else "failed"
            error = older.message if older.state == "failure" else None
        worked = worked or older.state == "working"
    if ended is None and worked:
        waiting = not runner and (_WAITING.search(latest.message) or any(
            _WAITING.search(s.message) for s in statuses[1:3] if s.state == "working"))
        if waiting:  # what the screen asks is known only live (show_agent): no prompt id here
            screen = Pending(tool="screen", summary=latest.message, since=latest.created_at)
            return Status("needs_input", source="app status", since=latest.created_at, pending=screen)
        ended = "interrupted"
    return Status("idle", source="app status", since=latest.created_at, last_turn=ended, last_turn_error=error)


def list_status(snap: Snapshot) -> Status:
    """The status a list shows, from the workspace alone."""
    base = base_status(snap)
    if not isinstance(base, Ready):
        return base
    ws, app = snap.workspace, snap.app
    if not ws.sends_app_statuses:
        return Status("unknown", UNREPORTED, "no app statuses", base.since)
    statuses = app_statuses(snap)
    if app is not None and not app.statuses and (fresh := fresh_app_status(ws)) is not None:
        statuses = [fresh]  # a listing without per-app history
    if not statuses and ws.latest_build.build_number <= 1:
        # A new agent's first turn is its spec, which starts as soon as its program is up.
        return Status("busy", source="app status", since=base.since)
    if not statuses:
        # Restarted: its program reports once Claude Code is up again (AgentAPI's replay, the runner's ready);
        # until then a task would only wait, so it is not idle yet.
        return Status("starting", source="app status", since=base.since)
    return turn_status(statuses, runner=snap.kind == "runner")


def live_status(snap: Snapshot) -> Status:
    """The status of one agent whose driver was asked: the driver says busy or not, app statuses say how
    the last turn ended (and, on AgentAPI, whether a prompt waits)."""
    base = base_status(snap)
    if not isinstance(base, Ready):
        return base
    live = snap.live
    if live is None:
        return Status("offline", snap.unreachable, base.source, base.since)
    turn = list_status(snap)
    if turn.value == "unknown":  # the driver answers what the listing could not; how the last turn ended stays unknown
        turn = Status("idle", source="driver", since=live.since)
    if live.state == "starting":  # the runner is (re)connecting to Claude Code; work it holds waits for it
        return Status("busy" if live.queued else "starting", source="driver", since=live.since)
    if live.state == "working":
        return Status("busy", source="driver", since=live.since or turn.since)
    if live.state == "needs_input":
        return Status("needs_input", waits_for(live.pending) if live.pending else None, "driver",
                      live.pending.since if live.pending else live.since, pending=live.pending)
    if live.state == "error":
        return Status("failed", live.error or "The agent's program reported an error.", "driver", live.since)
    runner = snap.kind == "runner"
    if turn.value in ("busy", "starting") or (turn.value == "needs_input" and runner):
        # The reporter lags behind the driver: the turn is over, the prompt answered, the program up. (AgentAPI's
        # `stable` cannot tell a prompt on its screen from a finished turn: there the reports decide.)
        turn = replace(turn, value="idle", problem=None, pending=None)
    return replace(turn, source="driver", since=live.since or turn.since)


def needs_attention(statuses: list[WorkspaceAppStatus], i: int) -> bool:
    """Failure; or idle after working without a `complete` in between; or the deprecated flag."""
    status = statuses[i]
    if status.state == "failure" or status.needs_user_attention:
        return True
    if status.state != "idle":
        return False
    worked = False
    for older in statuses[i + 1:]:  # newest first: walk back to the previous idle
        if older.state == "complete":
            return False
        if older.state == "idle":
            break
        worked = True
    return worked
