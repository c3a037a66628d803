"""Coder's workspace scheduling, as far as the fleet needs it: TTL, deadlines, activity bumps, autostop.

Rules after coderd: `validWorkspaceTTLMillis` (create and `PUT .../ttl`),
`schedule.CalculateAutostop` (a start build's `deadline` = completion + TTL,
where a template that disallows user autostop imposes its `default_ttl_ms`),
the `ActivityBumpWorkspace` query (an app status of `working`, or leaving
`working`, pushes the deadline to now + the template's activity bump once 5%
of that bump has passed; never down, never past `max_deadline`) and the
lifecycle executor's autostop (a stop build, reason `autostop`, by the owner).

Departures: the executor here fires at the deadline itself, not on Coder's
one-minute tick; agent connection stats (SSH, terminals) are not emulated, so
only app statuses bump; `max_deadline` comes from the template's
emulator-only `max_deadline_ms` (Coder derives it from an autostop
requirement and the owner's quiet hours, an enterprise feature). No HTTP here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from .errors import ErrorAnswer
from .state import Template, Workspace

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["Schedule", "ttl_error"]

MINUTE_MS = 60_000
TTL_MAX_MS = 30 * 24 * 60 * MINUTE_MS
NOT_ALLOWED = "Custom autostop TTL is not allowed for workspaces using this template."


def ttl_error(message: str, detail: str) -> ErrorAnswer:
    return ErrorAnswer(400, message, validations=[{"field": "ttl_ms", "detail": detail}])


def valid_ttl(raw: object, template_default_ms: int, message: str, struct: str) -> int | None:
    """Coder's `validWorkspaceTTLMillis`: None/0 is the template default (or no TTL), else whole minutes."""
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int | float)):
        kind = "string" if isinstance(raw, str) else "bool" if isinstance(raw, bool) else "object"
        raise ErrorAnswer(400, "Request body must be valid JSON.",
                         f"json: cannot unmarshal {kind} into Go struct field {struct}.ttl_ms of type int64")
    if not raw:
        return template_default_ms or None
    truncated = int(raw) // MINUTE_MS * MINUTE_MS
    if truncated < MINUTE_MS:
        raise ttl_error(message, "time until shutdown must be at least one minute")
    if truncated > TTL_MAX_MS:
        raise ttl_error(message, "time until shutdown must be less than 30 days")
    return truncated


def effective_ttl_ms(ws: Workspace, template: Template) -> int | None:
    """The TTL a build uses and the workspace shows: the template's when users may not set their own."""
    if not template.allow_user_autostop:
        return template.default_ttl_ms or None
    return ws.ttl_ms


class Schedule:
    """Deadlines of start builds and the autostop that follows them, on the backend's clock."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        backend.lifecycle.listeners.append(self._on_lifecycle)

    def set_ttl(self, ws: Workspace, body: dict) -> None:
        """`PUT /workspaces/{id}/ttl`. A new TTL applies from the next start; none lifts the current deadline."""
        template = self.backend.templates[ws.template_id]
        message = "Error updating workspace time until shutdown."
        if not template.allow_user_autostop:
            raise ttl_error(message, NOT_ALLOWED)
        ttl = valid_ttl(body.get("ttl_ms"), 0, message, "UpdateWorkspaceTTLRequest")
        ws.ttl_ms = ttl
        build = ws.latest_build
        if ttl is None and build.transition == "start":
            build.deadline = build.max_deadline

    def app_activity(self, ws: Workspace, previous: str | None, state: str) -> None:
        """Coder's `shouldBump`: reporting `working`, or leaving it, is activity."""
        if state == "working" or previous == "working":
            self.bump(ws)

    def bump(self, ws: Workspace) -> None:
        build = ws.latest_build
        template = self.backend.templates[ws.template_id]
        interval = timedelta(milliseconds=template.activity_bump_ms)
        now = self.backend.now()
        if (build.transition != "start" or build.job.completed_at is None or not template.activity_bump_ms
                or build.deadline is None or build.deadline - interval * 0.95 >= now):
            return
        deadline = max(build.deadline, now + interval)
        build.deadline = min(deadline, build.max_deadline) if build.max_deadline else deadline

    def _on_lifecycle(self, event: str, ws: Workspace) -> None:
        if event != "started":
            return
        build = ws.latest_build
        template = self.backend.templates[ws.template_id]
        completed = build.job.completed_at or self.backend.now()
        ttl = effective_ttl_ms(ws, template)
        build.deadline = completed + timedelta(milliseconds=ttl) if ttl else None
        build.max_deadline = completed + timedelta(milliseconds=template.max_deadline_ms) \
            if template.max_deadline_ms else None
        if build.max_deadline and (build.deadline is None or build.max_deadline < build.deadline):
            build.deadline = build.max_deadline
        self._watch(ws, build.id)

    def _watch(self, ws: Workspace, build_id: str) -> None:
        build = ws.latest_build
        if build.id != build_id or build.deadline is None:
            return
        delay = (build.deadline - self.backend.now()).total_seconds()
        self.backend.clock.call_later(max(delay, 0.0), lambda: self._due(ws, build_id))

    def _due(self, ws: Workspace, build_id: str) -> None:
        build = ws.latest_build
        if ws.deleted or build.id != build_id or build.transition != "start" or build.job.status != "succeeded":
            return  # a newer build took over, or this one never came up
        if build.deadline is None:
            return  # the TTL was lifted
        if self.backend.now() < build.deadline:
            self._watch(ws, build_id)  # bumped meanwhile
            return
        self.backend.autostop(ws)
