"""How builds, agents and apps move over time, as timers on the emulator's clock.

A start build: job pending → running → succeeded (resources and agent appear),
then the agent connects (connecting → connected, lifecycle created → starting),
runs its startup scripts (→ ready, or start_error), and the app's health check
passes (initializing → healthy). Stop and delete builds take the agent away.
A cancelled job goes canceling → canceled. Durations come from `Timings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from .state import Agent, App, Build, TemplateVersion, Workspace, new_id

__all__ = ["Lifecycle", "Timings"]

Listener = Callable[[str, Workspace], None]


@dataclass
class Timings:
    """Seconds each step takes (the emulator's settings)."""

    job_queue: float = 0.3
    start_build: float = 1.5
    stop_build: float = 1.0
    delete_build: float = 1.0
    cancel: float = 0.5
    agent_connect: float = 0.5
    agent_startup: float = 1.0
    app_healthy: float = 0.5


class Lifecycle:
    """Schedules the state changes that follow a build; tells listeners about them.

    Listeners get `(event, workspace)` with event one of `started` (a start
    job succeeded: its agent exists), `app_ready` (the agent's apps are
    healthy) and `agent_gone` (the agent went away: stop, delete, or a new
    build replaced it).
    """

    def __init__(self, clock: Clock, timings: Timings) -> None:
        self.clock = clock
        self.timings = timings
        self.listeners: list[Listener] = []

    def _emit(self, event: str, ws: Workspace) -> None:
        for listener in list(self.listeners):
            listener(event, ws)

    def begin(self, ws: Workspace, build: Build, version: TemplateVersion) -> None:
        """Run a freshly queued build to its end.

        The previous build's agent goes away when the new job starts running
        (the provisioner replaces or destroys its container).
        """
        duration = {
            "start": self.timings.start_build,
            "stop": self.timings.stop_build,
            "delete": self.timings.delete_build,
        }[build.transition]

        def run() -> None:
            if build.job.status != "pending":
                return
            build.job.status = "running"
            build.job.started_at = self.clock.now()
            self._disconnect(ws, before=build)
            self.clock.call_later(duration, finish)

        def finish() -> None:
            if build.job.status != "running":
                return
            build.job.completed_at = self.clock.now()
            if version.build_error:
                build.job.status = "failed"
                build.job.error = version.build_error
                return
            build.job.status = "succeeded"
            if build.transition == "delete":
                ws.deleted = True
            if build.transition == "start":
                self._provision(ws, build, version)
                self._emit("started", ws)

        self.clock.call_later(self.timings.job_queue, run)

    def cancel(self, build: Build) -> None:
        job = build.job
        job.status = "canceling"
        job.canceled_at = self.clock.now()

        def done() -> None:
            job.status = "canceled"
            job.completed_at = self.clock.now()

        self.clock.call_later(self.timings.cancel, done)

    def _disconnect(self, ws: Workspace, before: Build) -> None:
        for previous in ws.builds:
            if previous is before:
                break
            for agent in previous.agents:
                if agent.status != "disconnected":
                    agent.status = "disconnected"
                    agent.lifecycle_state = "off"
                    agent.disconnected_at = self.clock.now()
                    for app in agent.apps:
                        app.health = "unhealthy"
                    self._emit("agent_gone", ws)

    def _provision(self, ws: Workspace, build: Build, version: TemplateVersion) -> None:
        now = self.clock.now()
        # App ids stay stable per workspace, so a status history spans builds.
        apps = [App(id=ws.app_ids.setdefault(slug, new_id()), slug=slug, subdomain=slug in version.subdomain_apps)
                for slug in version.apps]
        agent = Agent(id=new_id(), resource_id=build.resource_id, name="main", created_at=now, apps=apps)
        build.agents.append(agent)

        def connect() -> None:
            if agent.status != "connecting":
                return
            agent.status = "connected"
            agent.lifecycle_state = "starting"
            agent.first_connected_at = agent.last_connected_at = agent.started_at = self.clock.now()
            self.clock.call_later(self.timings.agent_startup, ready)

        def ready() -> None:
            if agent.status != "connected":
                return
            agent.lifecycle_state = "start_error" if version.startup_error else "ready"
            agent.ready_at = self.clock.now()
            self.clock.call_later(self.timings.app_healthy, healthy)

        def healthy() -> None:
            if agent.status != "connected":
                return
            for app in agent.apps:
                app.health = "healthy"
            self._emit("app_ready", ws)

        self.clock.call_later(self.timings.agent_connect, connect)
