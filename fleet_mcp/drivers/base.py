"""The one door to the agent inside a workspace: the `Driver` protocol and what it answers.

A driver speaks to the program that runs Claude Code in one workspace, through
Coder's app proxy. The fleet knows drivers only through this module: their
live state, the conversation, sending, interrupting, answering a pending
permission, and the results of finished turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from pydantic import JsonValue

from .. import models
from ..coder import errors as ce

__all__ = [
    "Answered", "Busy", "Driver", "DriverError", "DriverKind", "IfBusy", "Live", "LiveState", "Message",
    "NothingPending", "NotSupported", "Pending", "StalePrompt", "TurnEnd", "TurnResult", "Unkeyed", "Unreachable",
    "oversized",
]

LiveState = Literal["starting", "working", "idle", "needs_input", "error"]
IfBusy = Literal["reject", "queue", "interrupt"]
DriverKind = Literal["runner", "agentapi"]  # what runs Claude Code in a workspace
TurnEnd = Literal["succeeded", "failed", "interrupted"]  # how a turn ended


@dataclass(frozen=True)
class Pending:
    """What the agent waits on: a tool it asked permission for, or a choice on its screen. `id` names it for
    an answer: the runner's own prompt id, or on AgentAPI a digest of the screen (`agentapi.screen_prompt`).
    `input` is what an allow approves, whole unless `truncated` (`chars`: its whole length as JSON), and
    `digest` names it for the answer; both None where only a list's mark was read (the agent can post that)."""

    tool: str
    summary: str
    since: datetime | None = None
    id: str | None = None
    input: dict[str, JsonValue] | None = None
    truncated: bool = False
    chars: int | None = None
    digest: str | None = None


@dataclass(frozen=True)
class Answered:
    """How a prompt was answered: `decision` allow or deny, `by` fleet, timeout, interrupt or turn_ended."""

    id: str
    decision: str
    by: str
    at: datetime | None = None
    digest: str | None = None  # of the prompt answered (runner)


@dataclass(frozen=True)
class Live:
    """The agent's state as its driver reports it now. Fields a driver cannot know stay None."""

    state: LiveState
    can_interrupt: bool = True
    pending: Pending | None = None
    error: str | None = None
    since: datetime | None = None
    current_task: str | None = None
    latest_output: str | None = None  # the tail of the newest thing the agent said: untrusted text (runner)
    queued: int = 0
    turns: int | None = None
    cost_usd: float | None = None
    model: str | None = None
    last_turn: TurnEnd | None = None  # (runner)
    last_cost_usd: float | None = None
    changes_summary: str | None = None  # "3 files, +120 −8" (runner)
    answered: tuple[Answered, ...] = ()  # prompts answered lately, newest last (runner)

    def answer_of(self, prompt_id: str) -> Answered | None:
        return next((a for a in reversed(self.answered) if a.id == prompt_id), None)


@dataclass(frozen=True)
class Message:
    """One entry of the conversation: `user`, `assistant`/`agent`, `tool_use` or `tool_result`."""

    id: int
    role: str
    content: str
    time: datetime | None


@dataclass(frozen=True)
class TurnResult:
    """A finished turn, as far as the driver knows it."""

    task: str
    text: str
    is_error: bool
    finished_at: datetime | None
    num_turns: int | None = None
    duration_ms: int | None = None
    cost_usd: float | None = None
    session_id: str | None = None
    pull_request_url: str | None = None
    interrupted: bool = False
    subtype: str = ""
    changes: models.Changes | None = None  # what the turn changed in the repository (runner)
    changes_unavailable: str | None = None
    structured: JsonValue = None


class DriverError(Exception):
    """A driver could not do what was asked; `str()` says why in words for the caller."""


class Busy(DriverError):
    """The agent is in a turn and the message was not queued."""


class Unreachable(DriverError):
    """The agent's program cannot be reached through the app proxy (stopped, disconnected, no such app)."""


class Unkeyed(Unreachable):
    """The runner cannot be opened with what this server holds: a setting to fix (FLEET_MCP_RUNNER_SECRET),
    not the agent's state."""


class NothingPending(DriverError):
    """An answer was given but the agent waits on nothing."""


class StalePrompt(DriverError):
    """An answer named a prompt that no longer waits: what waits now, and how that prompt was answered."""

    def __init__(self, message: str, pending: Pending | None, answered: Answered | None) -> None:
        super().__init__(message)
        self.pending, self.answered = pending, answered


class NotSupported(DriverError):
    """This driver cannot do that (e.g. AgentAPI has no queue, no cost, no result)."""


class Driver(Protocol):
    """Talks to the Claude Code of one workspace."""

    kind: DriverKind
    slug: str  # the app it is reached through
    address: tuple[str, str, str | None, str]  # owner, workspace, agent, app slug: where it reaches the agent

    async def live(self, *, deadline: float | None) -> Live:
        """The state now (its request over by `deadline`, a loop time; every method takes one)."""
        ...

    async def conversation(self, *, deadline: float | None) -> list[Message]:
        """The whole conversation, oldest first."""
        ...

    async def send(self, text: str, if_busy: IfBusy = "reject", result_schema: dict[str, JsonValue] | None = None,
                   *, deadline: float | None) -> bool:
        """Send a task (its answer in `result_schema`'s shape when given); True when it was queued rather than
        started. `Busy` when refused."""
        ...

    async def interrupt(self, *, deadline: float | None) -> None:
        """Interrupt the running turn (the agent stays)."""
        ...

    async def answer(self, decision: str, message: str = "", prompt_id: str | None = None, digest: str | None = None,
                     allow_truncated: bool = False, *, deadline: float | None) -> Pending | None:
        """Answer what the agent waits on, only if it is `prompt_id` as shown (`digest`) where the program can
        check it itself (`StalePrompt` when another prompt waits or it was shown otherwise); `NothingPending`
        when it waits on nothing. The prompt answered, as the program names it, where it does."""
        ...

    async def reported_errors(self, wait: float, *, deadline: float | None) -> list[str]:
        """Errors the program itself reported, newest last (best effort, bounded by `wait`)."""
        ...

    async def last_result(self, *, deadline: float | None) -> TurnResult | None:
        """The last finished turn (None before one); `NotSupported` where the program keeps none."""
        ...

    async def diff(self, scope: models.DiffScope, path: str | None, fmt: str, page: int, page_size: int, *,
                   deadline: float | None) -> models.AgentDiff:
        """A page of the diff of the last task or of everything since the start; `NotSupported` where the
        program records no changes, `DriverError` (its reason) when it cannot give this one."""
        ...


def oversized(name: str, exc: ce.Oversized) -> ce.Oversized:
    """`exc`, naming the agent whose program sent the answer (it is the agent's to replace: untrusted)."""
    named = ce.Oversized(None, exc.message, exc.detail, cause=exc.cause)
    named.agent = name
    return named
