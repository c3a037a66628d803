"""Status rules: pure functions over what Coder and the driver said about an agent. No I/O.

A list sees only workspaces (one Coder request for the whole fleet); a single
agent's answer also has its build parameters and its driver's live state,
gathered concurrently into one `Snapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .coder.schemas import Workspace, WorkspaceAppStatus
from .drivers import Live, Slugs, agent_and_app

__all__ = ["READY", "Snapshot", "base_status", "fresh_app_status", "list_status", "live_status", "needs_attention"]

READY = "ready"  # base_status's word for "the driver decides"


@dataclass(frozen=True)
class Snapshot:
    """One agent as gathered for a call: the workspace, its build parameters and the driver's answer."""

    workspace: Workspace
    params: dict[str, str] = field(default_factory=dict)
    live: Live | None = None
    unreachable: str | None = None  # why the driver could not be asked, when it could not


def base_status(ws: Workspace, slugs: Slugs) -> tuple[str, str | None]:
    """(status, problem) from the build, the workspace agent and the app alone; `READY` when the driver decides."""
    build = ws.latest_build
    if build.status == "failed":
        return "failed", build.job.error or "The workspace build failed."
    if build.status != "running":
        return build.status or "pending", None
    agent, app = agent_and_app(ws, slugs)
    if agent is None or agent.status == "connecting" or agent.lifecycle_state in ("created", "starting", ""):
        return "starting", None
    if agent.status in ("disconnected", "timeout"):
        return "offline", f"The workspace agent is {agent.status}."
    if agent.lifecycle_state in ("start_error", "start_timeout"):
        return "failed", agent.health.reason or f"The agent's startup scripts ended in {agent.lifecycle_state}."
    if app is None:
        return "offline", (f"The workspace has no app {slugs.runner!r} or {slugs.agentapi!r}: its template "
                           "lacks the runner or AgentAPI app.")
    if app.health == "initializing":
        return "starting", None
    if app.health == "unhealthy":
        program = "The runner" if app.slug == slugs.runner else "AgentAPI"
        return "offline", f"{program} (app {app.slug!r}) does not answer its health check."
    return READY, None


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


def list_status(ws: Workspace, slugs: Slugs) -> str:
    """The status a list shows, from the workspace alone."""
    status, _ = base_status(ws, slugs)
    if status != READY:
        return status
    # Only the reporter's `idle` ends a turn; `complete` or `failure` come just before it, while the agent
    # is still winding down.
    fresh = fresh_app_status(ws)
    return "idle" if fresh is None or fresh.state == "idle" else "busy"


def live_status(snap: Snapshot, slugs: Slugs) -> tuple[str, str | None]:
    """(status, problem) of one agent whose driver was asked."""
    status, problem = base_status(snap.workspace, slugs)
    if status != READY:
        return status, problem
    if snap.live is None:
        return "offline", snap.unreachable
    return ("busy" if snap.live.state == "working" else "idle"), None


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
