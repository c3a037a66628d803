"""The runner driver: `fleet-mcp runner`, Claude Code on Anthropic's Agent SDK, reached through the app proxy.

The runner keeps the conversation, a pending permission, a queue and every
turn's result itself (see specs/runner.md), so this side only reads and sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar
from urllib.parse import urlencode

from pydantic import JsonValue

from .. import models
from .. import runner_wire as wire
from ..coder import errors as ce
from ..coder.bounded import Limit
from ..coder.client import App, CoderClient
from ..coder.lenient import parse_timestamp
from .base import (
    Answered,
    Busy,
    DriverError,
    DriverKind,
    IfBusy,
    Live,
    LiveState,
    Message,
    NothingPending,
    Pending,
    StalePrompt,
    TurnResult,
    Unkeyed,
    Unreachable,
    oversized,
)

__all__ = ["RunnerDriver"]

T = TypeVar("T")
A = TypeVar("A", bound=wire.Answer)
KEY_HEADER = "X-Fleet-Runner-Key"  # the runner's door (fleet_mcp/runner/door.py); Coder's app proxy passes it on
_STATES: dict[str, LiveState] = {"working": "working", "starting": "starting", "idle": "idle",
                                 "needs_input": "needs_input", "error": "error"}


class RunnerDriver:
    """One workspace's runner, at its app `<slug>` (by path or subdomain, see `coder.apps`)."""

    kind: DriverKind = "runner"

    def __init__(self, client: CoderClient, app: App, key: str | None = None, locked: str | None = None) -> None:
        self.client = client
        self.app = app
        self.slug = app.slug
        self.address = (app.owner, app.workspace, app.agent, app.slug)
        self._door: tuple[tuple[str, str], ...] = ((KEY_HEADER, key),) if key else ()
        self._locked = locked

    async def _call(self, method: str, rest: str, model: type[A], body: wire.Request | None = None,
                    limit: Limit = "status", *, deadline: float | None) -> A:
        if self._locked:
            raise Unkeyed(f"The runner cannot be called: {self._locked}.")
        json = body.model_dump(exclude_none=True) if body is not None else None
        return await _reachable(self.slug, lambda: self.client.app_request(
            method, self.app, rest, model, json=json, limit=limit, deadline=deadline, headers=self._door),
            self.address[1])

    async def live(self, *, deadline: float | None) -> Live:
        return _live(await self._call("GET", "state", wire.State, deadline=deadline))

    async def conversation(self, *, deadline: float | None) -> list[Message]:
        page = await self._call("GET", "messages", wire.Messages, limit="conversation", deadline=deadline)
        return [Message(id=m.id, role=m.role, content=m.content, time=_time(m.time)) for m in page.messages]

    async def send(self, text: str, if_busy: IfBusy = "reject", result_schema: dict[str, JsonValue] | None = None,
                   *, deadline: float | None) -> bool:
        body = wire.MessageBody(content=text, if_busy=if_busy, result_schema=result_schema)
        try:
            sent = await self._call("POST", "message", wire.Sent, body, deadline=deadline)
        except ce.Conflict as exc:
            raise Busy("The agent already has a running task.") from exc
        return sent.queued

    async def interrupt(self, *, deadline: float | None) -> None:
        try:
            await self._call("POST", "interrupt", wire.Done, wire.EmptyBody(), deadline=deadline)
        except ce.Conflict:
            raise DriverError("There is no running task to interrupt.") from None

    async def answer(self, decision: str, message: str = "", prompt_id: str | None = None, digest: str | None = None,
                     allow_truncated: bool = False, *, deadline: float | None) -> Pending | None:
        if not prompt_id or not digest:
            raise NothingPending("The runner answers only a prompt named by its id and digest.")
        if decision not in ("allow", "deny"):
            raise DriverError("The runner takes 'allow' or 'deny'.")
        body = wire.AnswerBody(decision="allow" if decision == "allow" else "deny", message=message,
                               prompt_id=prompt_id, digest=digest, allow_truncated=allow_truncated)
        try:
            done = await self._call("POST", "answer", wire.AnswerDone, body, deadline=deadline)
        except ce.Conflict as exc:
            # The runner refused it atomically (another prompt, another digest, a cut input): what waits now.
            now = await self.live(deadline=deadline)
            raise StalePrompt(exc.message, now.pending, now.answer_of(prompt_id)) from None
        return _pending(done.answered) if done.answered else None

    async def reported_errors(self, wait: float, *, deadline: float | None) -> list[str]:
        state = await self._call("GET", "state", wire.State, deadline=deadline)
        return [state.error] if state.error else []

    async def last_result(self, *, deadline: float | None) -> TurnResult | None:
        last = await self._call("GET", "result", wire.LastResult, limit="conversation", deadline=deadline)
        r = last.result
        if r is None:
            return None
        return TurnResult(task=r.task, text=r.text, is_error=r.is_error, finished_at=_time(r.finished_at),
                          num_turns=r.num_turns, duration_ms=r.duration_ms, cost_usd=r.total_cost_usd,
                          session_id=r.session_id, pull_request_url=r.pull_request_url,
                          interrupted=r.interrupted, subtype=r.subtype, changes=_changes(r.changes),
                          changes_unavailable=r.changes_unavailable, structured=r.structured)

    async def diff(self, scope: models.DiffScope, path: str | None, fmt: str, page: int, page_size: int, *,
                   deadline: float | None) -> models.AgentDiff:
        query = urlencode({"scope": scope, "format": fmt, "page": page, "page_size": page_size,
                           **({"path": path} if path is not None else {})})
        try:
            d = await self._call("GET", f"diff?{query}", wire.Diff, deadline=deadline)
        except ce.BadRequest as exc:
            raise DriverError(exc.message) from None
        return models.AgentDiff(
            agent_name=self.address[1], scope=scope, page=page, pages=d.pages,
            files=[models.DiffFile(path=f.path, diff=f.diff, truncated=f.truncated, binary=f.binary, note=f.note)
                   for f in d.files], patch=d.patch if fmt == "patch" else None, files_total=d.files_total,
            start_commit=d.start_commit, end_commit=d.end_commit)


def _pending(p: wire.Pending) -> Pending:
    return Pending(p.tool, p.summary, _time(p.since), p.id or None, dict(p.input), p.input_truncated, p.input_chars,
                   p.digest or None)


def _live(s: wire.State) -> Live:
    pending = _pending(s.pending) if s.pending else None
    return Live(state=_STATES.get(s.state, "working"), pending=pending, error=s.error, since=_time(s.since),
                current_task=s.current_task, latest_output=s.latest_output, queued=s.queued, turns=s.turns,
                cost_usd=s.cost_usd, model=s.model, last_turn=s.last_turn, last_cost_usd=s.last_cost_usd,
                changes_summary=s.changes_summary,
                answered=tuple(Answered(a.id, a.decision, a.by, _time(a.at), a.digest or None) for a in s.answered))


def _changes(c: wire.Changes | None) -> models.Changes | None:
    """The runner's summary in the tool's shape (the runner's own fields, its trees, left behind)."""
    if c is None:
        return None
    return models.Changes(
        repository=c.repository, branch=c.branch, start_commit=c.start_commit, end_commit=c.end_commit,
        commits=[models.Commit(sha=m.sha, subject=m.subject) for m in c.commits], commits_total=c.commits_total,
        files=[models.ChangedFile(path=f.path, change=f.change, old_path=f.old_path, added_lines=f.added_lines,
                                  removed_lines=f.removed_lines, binary=f.binary) for f in c.files],
        files_total=c.files_total, added_lines=c.added_lines, removed_lines=c.removed_lines, note=c.note)


def _time(text: str | None) -> datetime | None:
    """A time the runner wrote, read; one that is no time (or past datetime's range in UTC) is None: the agent's
    words, never the call's failure."""
    try:
        return parse_timestamp(text)
    except (ValueError, OverflowError):
        return None


async def _reachable(slug: str, call: Callable[[], Awaitable[T]], name: str) -> T:
    try:
        return await call()
    except ce.Oversized as exc:
        raise oversized(name, exc) from None
    except ce.AppNotFound:
        raise Unreachable(f"The workspace has no app {slug!r}: its template lacks the runner app.") from None
    except (ce.WorkspaceOffline, ce.AppUnavailable) as exc:
        raise Unreachable(f"The runner cannot be reached: {exc.message}") from None
    except ce.Unauthorized as exc:
        if exc.status != 401:  # Coder's own refusal is a redirect to /login: the caller's token
            raise
        raise Unkeyed(f"The runner refused the fleet's key ({exc.message}): the agent was created without "
                          "one (its template lacks fleet_mcp_runner_key), or by a server with another "
                          "FLEET_MCP_RUNNER_SECRET (set the same one), or something else listens on its "
                          "port.") from None
