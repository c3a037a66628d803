"""Drivers: how the fleet talks to the Claude Code inside a workspace. See `base.Driver`.

The driver of a workspace follows from the app its template gives the agent:
the runner's app (`fleet` by default) or AgentAPI's (`ccw` by default), so one
fleet holds agents of both kinds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..coder.client import App, CoderClient
from ..coder.schemas import Workspace, WorkspaceAgent, WorkspaceApp
from .agentapi import AgentAPIDriver, screen_prompt
from .base import (
    Answered,
    Busy,
    Driver,
    DriverError,
    DriverKind,
    IfBusy,
    Live,
    LiveState,
    Message,
    NothingPending,
    NotSupported,
    Pending,
    StalePrompt,
    TurnEnd,
    TurnResult,
    Unkeyed,
    Unreachable,
)
from .runner import RunnerDriver

__all__ = [
    "AgentAPIDriver", "Answered", "Busy", "Driver", "DriverError", "DriverKind", "IfBusy", "Live", "LiveState",
    "Message", "NothingPending", "NotSupported", "Pending", "RunnerDriver", "Slugs", "StalePrompt", "TurnEnd",
    "TurnResult", "Unkeyed", "Unreachable", "agent_and_app", "driver_app", "driver_for", "same_reach",
    "screen_prompt",
]


@dataclass(frozen=True)
class Slugs:
    """The app slugs that mark each driver's program, in the order they are looked for."""

    runner: str = "fleet"
    agentapi: str = "ccw"

    def all(self) -> tuple[str, str]:
        return self.runner, self.agentapi


def driver_app(agent: WorkspaceAgent, slugs: Slugs) -> WorkspaceApp | None:
    """The agent's runner or AgentAPI app (the runner's first), if it has one."""
    apps = agent.apps
    return next((app for slug in slugs.all() for app in apps if app.slug == slug), None)


def agent_and_app(ws: Workspace, slugs: Slugs) -> tuple[WorkspaceAgent | None, WorkspaceApp | None]:
    """The workspace's first agent and the driver app it offers, either may be None."""
    agents = ws.latest_build.agents
    return (agents[0], driver_app(agents[0], slugs)) if agents else (None, None)


def same_reach(a: Driver | None, b: Driver | None) -> bool:
    """Whether two drivers reach the same agent the same way (kind and address)."""
    return a is not None and b is not None and (a.kind, a.address) == (b.kind, b.address)


def driver_for(client: CoderClient, ws: Workspace, agent: WorkspaceAgent | None, app: WorkspaceApp, kind: DriverKind,
               key: str | None = None, locked: str | None = None) -> Driver:
    """The driver of `kind` reaching `app` of `ws`'s `agent` (as `agent_and_app` found them); `key` is the
    runner's (from its build parameter `fleet_mcp_runner_key`, see `keys`), sent on every call to it; `locked`,
    why the fleet holds no key for a runner that has one (each call then answers `Unreachable` with it)."""
    address = App(ws.owner_name, ws.name, agent.name if agent else None, app.slug, app.subdomain, app.subdomain_name)
    if kind == "runner":
        return RunnerDriver(client, address, key, locked)
    return AgentAPIDriver(client, address)
