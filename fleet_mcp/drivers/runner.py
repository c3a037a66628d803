"""The runner driver: `fleet-mcp runner`, Claude Code on Anthropic's Agent SDK, reached through the app proxy.

The runner keeps the conversation, a pending permission, a queue and every
turn's result itself (see specs/runner.md), so this side only reads and sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode

from ..coder import errors as ce
from ..coder.bounded import Limit
from ..coder.client import App, CoderClient
from ..coder.lenient import LenientModel, ListOf, Text, Timestamp
from .base import (
    Answered, Busy, DriverError, DriverKind, IfBusy, Live, LiveState, Message, NothingPending, Pending, StalePrompt,
    TurnEnd, TurnResult, Unkeyed, Unreachable, oversized,
)
from .wire import ConversationPage

__all__ = ["RunnerDriver"]

T = TypeVar("T")
KEY_HEADER = "X-Fleet-Runner-Key"  # the runner's door (fleet_mcp/runner/door.py); Coder's app proxy passes it on
_STATES: dict[str, LiveState] = {"working": "working", "starting": "starting", "idle": "idle",
                                 "needs_input": "needs_input", "error": "error"}


class _Pending(LenientModel):
    id: Text = ""
    tool: Text = ""
    summary: Text = ""
    input: dict[str, Any] | None = None
    input_truncated: bool = False
    input_chars: int | None = None
    digest: Text = ""
    since: Timestamp = None

    def pending(self) -> Pending:
        return Pending(self.tool, self.summary, self.since, self.id or None, self.input, self.input_truncated,
                       self.input_chars, self.digest or None)


class _Answered(LenientModel):
    id: Text = ""
    decision: Text = ""
    by: Text = ""
    at: Timestamp = None
    digest: str | None = None

    def answered(self) -> Answered:
        return Answered(self.id, self.decision, self.by, self.at, self.digest)


class _State(LenientModel):
    state: str
    since: Timestamp = None
    session_id: str | None = None
    model: str | None = None
    current_task: str | None = None
    latest_output: str | None = None
    pending: _Pending | None = None
    answered: ListOf[_Answered] = []
    error: str | None = None
    queued: int = 0
    turns: int = 0
    cost_usd: float = 0.0
    last_turn: TurnEnd | None = None
    last_cost_usd: float | None = None
    changes_summary: str | None = None


class _Commit(LenientModel):
    sha: Text = ""
    subject: Text = ""


class _File(LenientModel):
    path: Text = ""
    change: Literal["added", "modified", "deleted", "renamed"] = "modified"
    old_path: str | None = None
    added_lines: int = 0
    removed_lines: int = 0
    binary: bool = False


class _Changes(LenientModel):
    repository: Text = ""
    branch: str | None = None
    start_commit: str | None = None
    end_commit: str | None = None
    commits: ListOf[_Commit] = []
    commits_total: int = 0
    files: ListOf[_File] = []
    files_total: int = 0
    added_lines: int = 0
    removed_lines: int = 0
    note: str | None = None


class _DiffFile(LenientModel):
    path: Text = ""
    diff: Text = ""
    truncated: bool = False
    binary: bool = False
    note: str | None = None


class _Diff(LenientModel):
    files: ListOf[_DiffFile] = []
    patch: str | None = None
    page: int = 1
    pages: int = 1
    files_total: int = 0
    start_commit: str | None = None
    end_commit: str | None = None


class _Answer(LenientModel):
    answered: _Pending | None = None


class _Sent(LenientModel):
    queued: bool = False


class _Result(LenientModel):
    task: Text = ""
    text: Text = ""
    is_error: bool = False
    subtype: Text = ""
    num_turns: int | None = None
    duration_ms: int | None = None
    total_cost_usd: float | None = None
    session_id: str | None = None
    finished_at: Timestamp = None
    pull_request_url: str | None = None
    interrupted: bool = False
    changes: _Changes | None = None
    changes_unavailable: str | None = None
    structured: Any = None


class _Results(LenientModel):
    results: ListOf[_Result] = []


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

    async def _call(self, method: str, rest: str, model: Any = None, body: Any = None,
                    limit: Limit = "status", *, deadline: float | None) -> Any:
        if self._locked:
            raise Unkeyed(f"The runner cannot be called: {self._locked}.")
        return await _reachable(self.slug, lambda: self.client.app_request(
            method, self.app, rest, model, json=body, limit=limit, deadline=deadline, headers=self._door),
            self.address[1])

    async def live(self, *, deadline: float | None) -> Live:
        s: _State = await self._call("GET", "state", _State, deadline=deadline)
        pending = s.pending.pending() if s.pending else None
        return Live(state=_STATES.get(s.state, "working"), pending=pending, error=s.error, since=s.since,
                    current_task=s.current_task, latest_output=s.latest_output, queued=s.queued, turns=s.turns,
                    cost_usd=s.cost_usd, model=s.model, last_turn=s.last_turn, last_cost_usd=s.last_cost_usd,
                    changes_summary=s.changes_summary, answered=tuple(a.answered() for a in s.answered))

    async def conversation(self, *, deadline: float | None) -> list[Message]:
        page: ConversationPage = await self._call("GET", "messages", ConversationPage, limit="conversation",
                                                  deadline=deadline)
        return page.conversation()

    async def send(self, text: str, if_busy: IfBusy = "reject", result_schema: dict[str, Any] | None = None, *,
                   deadline: float | None) -> bool:
        body: dict[str, Any] = {"content": text, "if_busy": if_busy}
        if result_schema is not None:
            body["result_schema"] = result_schema
        try:
            sent: _Sent = await self._call("POST", "message", _Sent, body, deadline=deadline)
        except ce.Conflict as exc:
            raise Busy("The agent already has a running task.") from exc
        return sent.queued

    async def interrupt(self, *, deadline: float | None) -> None:
        try:
            await self._call("POST", "interrupt", None, {}, deadline=deadline)
        except ce.Conflict:
            raise DriverError("There is no running task to interrupt.") from None

    async def answer(self, decision: str, message: str = "", prompt_id: str | None = None, digest: str | None = None,
                     allow_truncated: bool = False, *, deadline: float | None) -> Pending | None:
        if not prompt_id or not digest:
            raise NothingPending("The runner answers only a prompt named by its id and digest.")
        try:
            done: _Answer = await self._call("POST", "answer", _Answer, {
                "decision": decision, "message": message, "prompt_id": prompt_id, "digest": digest,
                "allow_truncated": allow_truncated}, deadline=deadline)
        except ce.Conflict as exc:
            # The runner refused it atomically (another prompt, another digest, a cut input): what waits now.
            now = await self.live(deadline=deadline)
            raise StalePrompt(exc.message, now.pending, now.answer_of(prompt_id)) from None
        return done.answered.pending() if done.answered else None

    async def reported_errors(self, wait: float, *, deadline: float | None) -> list[str]:
        state: _State = await self._call("GET", "state", _State, deadline=deadline)
        return [state.error] if state.error else []

    async def results(self, *, deadline: float | None) -> list[TurnResult]:
        page: _Results = await self._call("GET", "results", _Results, limit="conversation", deadline=deadline)
        return [TurnResult(task=r.task, text=r.text, is_error=r.is_error, finished_at=r.finished_at,
                           num_turns=r.num_turns, duration_ms=r.duration_ms, cost_usd=r.total_cost_usd,
                           session_id=r.session_id, pull_request_url=r.pull_request_url,
                           interrupted=r.interrupted, subtype=r.subtype, changes=r.changes,
                           changes_unavailable=r.changes_unavailable, structured=r.structured)
                for r in page.results]

    async def diff(self, scope: str, path: str | None, fmt: str, page: int, page_size: int, *,
                   deadline: float | None) -> Any:
        query = urlencode({"scope": scope, "format": fmt, "page": page, "page_size": page_size,
                           **({"path": path} if path is not None else {})})
        try:
            return await self._call("GET", f"diff?{query}", _Diff, deadline=deadline)
        except ce.BadRequest as exc:
            raise DriverError(exc.message) from None


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
