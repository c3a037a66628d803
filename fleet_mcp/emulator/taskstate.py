"""A task's records and what Coder derives from them: status, current state, a generated name.

Pure functions of a task's workspace, no backend and no HTTP. The status
follows coderd's `tasks_with_status` view (v2.36): the latest build decides
(failed/canceled → error, stop or delete done → paused, start queued →
pending, start running or done → ask the agent), then the agent's lifecycle
(none/created/starting → initializing, ready/start_* → ask the app), then the
app's health (initializing, unhealthy → error, healthy → active); the rest is
unknown.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime

from .claude import SLUG
from .session import Message
from .state import Agent, App, Build, Workspace

__all__ = ["TASK_STATUSES", "Binding", "StateEntry", "Task", "binding", "current_state", "generate_name",
           "status", "tasks_api"]

TASK_STATUSES = ("pending", "initializing", "active", "paused", "unknown", "error")
_FALLBACK = (("brave", "calm", "eager", "jolly", "keen"), ("hopper", "lovelace", "turing", "ritchie", "knuth"))


def tasks_api(backend) -> bool:
    """Whether the emulated Coder has the Tasks API (v2.36 here; gone from v2.37)."""
    return backend.version.startswith("v2.36.")


@dataclass
class Task:
    """A row of coderd's `tasks` table: the prompt, beside the workspace that runs it."""

    id: str
    organization_id: str
    owner_id: str
    name: str
    display_name: str
    workspace_id: str
    template_version_id: str
    prompt: str
    created_at: datetime
    deleted: bool = False
    snapshot: list[Message] | None = None  # the conversation the agent uploaded when it stopped
    snapshot_at: datetime | None = None


@dataclass(frozen=True)
class StateEntry:
    """`current_state`: the latest app status (failure → failed), or an initialization note."""

    timestamp: datetime
    state: str
    message: str
    uri: str = ""


@dataclass(frozen=True)
class Binding:
    """What `task_workspace_apps` links a task to: the latest build, and its agent and app once built."""

    build: Build
    agent: Agent | None = None
    app: App | None = None


def binding(ws: Workspace) -> Binding:
    """Each build links anew; its agent and app are known once a start job succeeded."""
    build = ws.latest_build
    agent = build.agents[0] if build.transition == "start" and build.agents else None
    app = next((a for a in agent.apps if a.slug == SLUG), None) if agent else None
    return Binding(build, agent, app)


def status(ws: Workspace) -> str:
    """Coder's TaskStatus for a task run by `ws`."""
    link = binding(ws)
    job, transition = link.build.job.status, link.build.transition
    if job in ("failed", "canceling", "canceled"):
        return "error"
    if transition in ("stop", "delete") and job == "succeeded":
        return "paused"
    if transition == "start" and job == "pending":
        return "pending"
    if transition != "start" or job not in ("running", "succeeded"):
        return "unknown"
    lifecycle = link.agent.lifecycle_state if link.agent else None
    if lifecycle in (None, "created", "starting"):
        return "initializing"
    if lifecycle not in ("ready", "start_timeout", "start_error"):
        return "unknown"
    health = link.app.health if link.app else ""
    return {"initializing": "initializing", "unhealthy": "error", "healthy": "active",
            "disabled": "active"}.get(health, "unknown")


def current_state(ws: Workspace, task_status: str) -> StateEntry | None:
    """The latest app status unless it predates a start build; else, while initializing, what is happening."""
    link = binding(ws)
    build = link.build
    latest = ws.statuses[-1] if ws.statuses else None
    if latest and (build.transition != "start" or latest.created_at > build.created_at):
        state = "failed" if latest.state == "failure" else latest.state
        return StateEntry(latest.created_at, state, latest.message, latest.uri)
    if task_status != "initializing":
        return None
    message = "Initializing workspace"
    lifecycle = link.agent.lifecycle_state if link.agent else None
    if build.status in ("pending", "starting"):
        message = f"Workspace is {build.status}"
    elif lifecycle == "created":
        message = "Agent is connecting"
    elif lifecycle == "starting":
        message = "Agent is starting"
    elif lifecycle == "ready":
        initializing = link.app is not None and link.app.health == "initializing"
        message = "App is initializing" if initializing else "Initializing workspace applications"
    elif lifecycle is not None:
        message = "Initializing workspace agent"
    return StateEntry(build.created_at, "working", message)


def _truncate(text: str, n: int, ellipsis: bool = False) -> str:
    """Coder's strings.Truncate, cutting at a word boundary."""
    if len(text) <= n:
        return text
    cut = text[:n - 1 if ellipsis else n]
    space = max((i for i, ch in enumerate(cut) if ch.isspace()), default=-1)
    return (cut[:space] if space >= 0 else cut) + ("…" if ellipsis else "")


def generate_name(prompt: str) -> tuple[str, str]:
    """(name, display name) from the prompt, as taskname.Generate does without an Anthropic key."""
    suffix = f"{random.randrange(0x10000):04x}"
    prompt = re.sub(r"[\n\r\t]+", " ", prompt)
    name = re.sub(r"\s+", "-", _truncate(prompt, 27).lower())
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "", name)).strip("-")
    if not name:  # Coder's last resort: a Docker-style adjective-surname
        name = f"{random.choice(_FALLBACK[0])}-{random.choice(_FALLBACK[1])}"
        return f"{name}-{suffix}", name.replace("-", " ").capitalize()
    display = _truncate(prompt, 64, ellipsis=True).strip() or name.replace("-", " ")
    return f"{name}-{suffix}", display[:1].upper() + display[1:]
