"""The AgentAPI driver: Coder's screen-reading wrapper around Claude Code, reached through the app proxy.

AgentAPI knows two states (`running`, `stable`), a conversation read off the
screen, keystrokes, and the errors it replays on its event stream. It cannot
queue, keeps no results or cost, and interrupts only by an ESC keystroke,
which is no interrupt on its ACP transport.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import pydantic
from pydantic import Field, JsonValue

from .. import models
from ..coder import errors as ce
from ..coder.client import App, CoderClient
from ..coder.lenient import LenientModel, Text, Timestamp
from ..deadlines import sooner
from .base import (
    Busy,
    DriverKind,
    IfBusy,
    Live,
    Message,
    NothingPending,
    NotSupported,
    Pending,
    TurnResult,
    Unreachable,
    oversized,
)

__all__ = ["AgentAPIDriver", "AgentError", "AgentStatus", "is_busy_refusal", "screen_prompt"]

T = TypeVar("T")
ESC = "\x1b"
SETTLE_S = 10.0  # how long an interrupt-then-send waits for the screen to settle
SETTLE_POLL_S = 0.25
MESSAGES_MAX = 10_000  # of AgentAPI's conversation (it keeps every message): past it, the agent's problem


class WireMessage(LenientModel):
    """One entry of AgentAPI's `GET /messages` (`{"messages": [{id, role, content, time}]}`, oldest first)."""

    id: int
    role: Text = ""
    content: Text = ""
    time: Timestamp = None


class ConversationPage(LenientModel):
    messages: Annotated[list[WireMessage] | None, Field(max_length=MESSAGES_MAX)] = []  # Go's nil slice: null


class AgentStatus(LenientModel):
    """`running` (busy) or `stable` (waiting for input); `transport` is absent before v0.12."""

    status: str
    agent_type: Text = ""
    transport: str | None = None


class AgentError(LenientModel):
    """An `agent_error` event of AgentAPI's `/events` stream (v0.12+)."""

    level: Text = "error"
    message: Text = ""
    time: Timestamp = None


SCREEN_SHOWN = 65536  # characters of a screen shown as a prompt's input: its end, where the choice is


def screen_prompt(messages: list[Message]) -> Pending | None:
    """AgentAPI numbers no prompts: one is named by a digest of the screen that shows it (AgentAPI's newest
    agent message), so an answer meant for one screen is refused once another shows. See specs/tools.md."""
    shown = next((m for m in reversed(messages) if m.role != "user" and m.content.strip()), None)
    if shown is None:
        return None
    lines = [line.strip() for line in shown.content.splitlines() if line.strip()]
    digest = "screen-" + hashlib.sha256(shown.content.encode("utf-8", "replace")).hexdigest()[:16]
    return Pending(tool="screen", summary=" / ".join(lines[-4:])[-200:], since=shown.time, id=digest,
                   input={"screen": shown.content[-SCREEN_SHOWN:]}, truncated=len(shown.content) > SCREEN_SHOWN,
                   chars=len(shown.content), digest=digest)


def is_busy_refusal(exc: ce.CoderError) -> bool:
    """AgentAPI answers a user message sent mid-turn with a 500 problem, not a 409."""
    return "waiting for user input" in exc.message


class AgentAPIDriver:
    """One workspace's AgentAPI, at its app `<slug>` (by path or subdomain, see `coder.apps`)."""

    kind: DriverKind = "agentapi"

    def __init__(self, client: CoderClient, app: App) -> None:
        self.client = client
        self.app = app
        self.slug = app.slug
        self.address = (app.owner, app.workspace, app.agent, app.slug)

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except ce.Oversized as exc:
            raise oversized(self.address[1], exc) from None
        except ce.AppNotFound:
            raise Unreachable(f"The workspace has no app {self.slug!r}: its template lacks the AgentAPI "
                              "app.") from None
        except (ce.WorkspaceOffline, ce.AppUnavailable) as exc:
            raise Unreachable(f"AgentAPI cannot be reached: {exc.message}") from None

    async def _status(self, deadline: float | None) -> AgentStatus:
        status: AgentStatus = await self._call(
            lambda: self.client.app_request("GET", self.app, "status", AgentStatus, deadline=deadline))
        return status

    async def live(self, *, deadline: float | None) -> Live:
        status = await self._status(deadline)
        return Live(state="working" if status.status == "running" else "idle",
                    can_interrupt=status.transport != "acp")

    async def conversation(self, *, deadline: float | None) -> list[Message]:
        page: ConversationPage = await self._call(
            lambda: self.client.app_request("GET", self.app, "messages", ConversationPage, limit="conversation",
                                            deadline=deadline))
        return [Message(id=m.id, role=m.role, content=m.content, time=m.time) for m in page.messages or []]

    async def send(self, text: str, if_busy: IfBusy = "reject", result_schema: dict[str, JsonValue] | None = None,
                   *, deadline: float | None) -> bool:
        if result_schema is not None:
            raise NotSupported("A result_schema needs the runner (Claude Code's structured output); this agent "
                               "runs on AgentAPI.")
        if if_busy == "queue":
            raise NotSupported("Queueing a task needs the runner; this agent runs on AgentAPI, which takes a task "
                               "only between turns. Use if_busy='reject' and send it when the agent is idle, or "
                               "'interrupt'.")
        if if_busy == "interrupt" and (await self._status(deadline)).status == "running":
            await self.interrupt(deadline=deadline)
            await self._settle(deadline)
        await self._keys(text, "user", deadline)
        return False

    async def _settle(self, deadline: float | None) -> None:
        """Wait until the interrupted turn has ended: SETTLE_S at most, its status requests included."""
        end = asyncio.get_running_loop().time() + SETTLE_S
        try:
            async with asyncio.timeout_at(end):
                while (await self._status(sooner(deadline, end))).status == "running":
                    await asyncio.sleep(SETTLE_POLL_S)
        except TimeoutError:
            raise Busy("The agent did not stop after the interrupt.") from None

    async def _keys(self, content: str, kind: str, deadline: float | None) -> None:
        try:
            await self._call(lambda: self.client.app_request("POST", self.app, "message",
                                                             json={"content": content, "type": kind},
                                                             deadline=deadline))
        except ce.CoderError as exc:
            if is_busy_refusal(exc):
                raise Busy("The agent already has a running task.") from None
            raise

    async def interrupt(self, *, deadline: float | None) -> None:
        if not (await self.live(deadline=deadline)).can_interrupt:
            raise NotSupported("This agent speaks AgentAPI's ACP transport, where ESC does not interrupt a task.")
        await self._keys(ESC, "raw", deadline)

    async def answer(self, decision: str, message: str = "", prompt_id: str | None = None, digest: str | None = None,
                     allow_truncated: bool = False, *, deadline: float | None) -> Pending | None:
        # AgentAPI cannot tell a pending choice from a finished turn; only the reporter's evidence can, so the
        # fleet checks before it answers, `prompt_id` (the screen's digest) included: AgentAPI cannot.
        # Keys go as typed: "1", "2", "y", "n", or an Enter for "allow".
        keys = {"allow": "\r", "deny": ESC}.get(decision, decision)
        if not keys:
            raise NothingPending("Nothing to answer with.")
        await self._keys(keys, "raw", deadline)
        if message:
            await self._settle(deadline)
            await self._keys(message, "user", deadline)
        return None

    async def reported_errors(self, wait: float, *, deadline: float | None) -> list[str]:
        """The `agent_error`s AgentAPI replays at the start of `/events` (bounded by `wait` seconds).

        The stream replays messages, a status change, then stored errors, and goes
        on live: reading stops at the first event after the errors, or after `wait`.
        """
        errors: list[str] = []

        async def read() -> None:
            async with self.client.app_events(self.app, "events", deadline=deadline) as events:
                replayed_status = False
                async for event in events:
                    if replayed_status and event.event != "agent_error":
                        return
                    replayed_status = replayed_status or event.event == "status_change"
                    if event.event == "agent_error":
                        errors.append(AgentError.model_validate_json(event.data).message)

        try:
            await asyncio.wait_for(read(), wait)
        except (TimeoutError, ce.Unavailable, pydantic.ValidationError):
            pass
        return [e for e in errors if e]

    async def last_result(self, *, deadline: float | None) -> TurnResult | None:
        raise NotSupported("Turn results, cost and budgets need the runner; this agent runs on AgentAPI.")

    async def diff(self, scope: models.DiffScope, path: str | None, fmt: str, page: int, page_size: int, *,
                   deadline: float | None) -> models.AgentDiff:
        raise NotSupported("AgentAPI records no changes: diffs need the runner.")

