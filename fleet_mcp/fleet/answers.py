"""What the tools answer about an agent, built in one place from its workspace, parameters and status."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from ..coder.schemas import Workspace, WorkspaceAppStatus
from ..drivers import Driver, Live, Message, Pending, screen_prompt
from ..models import Agent, Metadata, PendingPrompt
from ..times import iso
from .rules import MODEL, PR_LINK, PROJECT, ROLE, SPEC
from .status import Status

__all__ = ["agent_answer", "facts", "last_activity", "prompt", "with_screen_prompt"]


def last_activity(ws: Workspace) -> datetime | None:
    """When the agent last reported anything, or else when its workspace last changed."""
    times = [t for t in (ws.latest_app_status.created_at if ws.latest_app_status else None,
                         ws.latest_build.updated_at, ws.latest_build.created_at) if t]
    return max(times) if times else None


def facts(status: Status) -> dict[str, Any]:
    """The status fields every answer about an agent carries."""
    return {"status": status.value, "status_source": status.source, "status_since": iso(status.since),
            "last_turn": status.last_turn, "last_turn_error": status.last_turn_error,
            "pending": prompt(status.pending) if status.value == "needs_input" else None}


def prompt(pending: Pending | None) -> PendingPrompt | None:
    """A pending prompt as the tools show it."""
    if pending is None:
        return None
    return PendingPrompt(prompt_id=pending.id, tool=pending.tool, input=pending.input,
                         input_truncated=pending.truncated, input_chars=pending.chars, digest=pending.digest,
                         summary=pending.summary, asked_at=iso(pending.since))


def with_screen_prompt(status: Status, driver: Driver | None, messages: list[Message] | None) -> Status:
    """An AgentAPI agent in needs_input, with the prompt its screen shows (named by the screen's digest)."""
    known = status.pending is not None and status.pending.id is not None
    if status.value != "needs_input" or known or driver is None or driver.kind != "agentapi":
        return status
    shown = screen_prompt(messages or [])
    return replace(status, pending=shown) if shown else status


def agent_answer(ws: Workspace, params: dict[str, str], status: Status, current: str | None,
                 statuses: list[WorkspaceAppStatus], *, problem: str | None = None, driver: Driver | None = None,
                 live: Live | None = None) -> Agent:
    """The answer about one agent, built in this one place (`problem`: the status's own when not given)."""
    pr = next((s.uri for s in statuses if s.uri and PR_LINK.match(s.uri)), None)
    project = params.get(PROJECT) or ws.template_name
    model = params.get(MODEL) or (live.model if live else None) or None
    return Agent(
        name=ws.name, workspace_id=ws.id, workspace_status=ws.latest_build.status, role=params.get(ROLE, ""),
        project=project, spec=params.get(SPEC, ""), current_task=current, created_at=iso(ws.created_at) or "",
        updated_at=iso(ws.updated_at or ws.created_at) or "", **facts(status),
        problem=problem if problem is not None else status.problem,
        driver=driver.kind if driver else None,
        model=model, total_cost_usd=live.cost_usd if live and driver and driver.kind == "runner" else None,
        last_activity_at=iso(last_activity(ws)),
        metadata=Metadata(fleet_mcp_agent_name=ws.name, fleet_mcp_role=params.get(ROLE, ""), fleet_mcp_project=project,
                          fleet_mcp_agent_spec=params.get(SPEC, ""), fleet_mcp_current_task=current,
                          fleet_mcp_pull_request_url=pr, fleet_mcp_model=params.get(MODEL) or None))
