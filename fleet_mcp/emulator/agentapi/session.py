"""What AgentAPI holds per workspace, and what `coder exp mcp server` makes of it.

A `Session` is one workspace's AgentAPI state: the conversation, its status and
transport, agent errors, event subscribers, and the turn Claude Code is on. It
lives in `Backend.sessions`, so it outlives builds. `Reporter` is the MCP
server's status queue. `Script` is what a scripted turn does. No behaviour over
time here: `claude.py` moves sessions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["MARKER", "Message", "Report", "Reporter", "Script", "Session", "Turn", "message_update"]

MARKER = re.compile(r"\[\[(finish|pr|fail|hang|permission|acp)(?::(\d+(?:\.\d+)?))?\]\]")
Sink = Callable[[tuple[str, dict] | None], None]


@dataclass(frozen=True)
class Script:
    """What a turn does: finish after `finish` seconds unless it hangs, asks, or fails."""

    finish: float = 5.0
    pr: bool = False
    fail: bool = False
    hang: bool = False
    permission: bool = False
    acp: bool = False

    @classmethod
    def parse(cls, text: str) -> Script | None:
        """The script the markers in `text` ask for, or None when there are none."""
        found = MARKER.findall(text)
        if not found:
            return None
        values: dict = {}
        for name, arg in found:
            values[name] = float(arg or cls.finish) if name == "finish" else True
        return cls(**values)


@dataclass
class Message:
    """One entry of AgentAPI's conversation; the last agent message is rewritten while it grows."""

    id: int
    role: str  # user | agent
    content: str
    time: datetime


@dataclass
class Report:
    """A task report as the MCP server queues it: an app status once accepted."""

    state: str = ""
    summary: str = ""
    link: str = ""
    message_id: int | None = None


class Reporter:
    """The status queue of `coder exp mcp server` (cli/exp_mcp.go): which reports become statuses.

    An already seen user message is dropped; a screen-watcher `working` is
    dropped unless it is the first report; an empty summary inherits the last
    summary and link; a report equal to the last one is dropped.
    """

    def __init__(self) -> None:
        self.last = Report()

    def accept(self, state: str, summary: str = "", link: str = "", message_id: int | None = None,
               self_reported: bool = False) -> Report | None:
        last = self.last
        if message_id is not None and last.message_id is not None and last.message_id >= message_id:
            return None
        if message_id is None and state == "working" and not self_reported and last.state:
            return None
        if not summary:
            summary, link = last.summary, link or last.link
        report = Report(state, summary, link, last.message_id if message_id is None else message_id)
        if (report.state, report.summary, report.link) == (last.state, last.summary, last.link):
            return None
        self.last = report
        return report


@dataclass
class Turn:
    """The prompt Claude Code is working on."""

    title: str
    script: Script
    message: Message  # the agent message this turn writes
    waiting: bool = False  # at a numbered permission prompt


@dataclass
class Session:
    """One workspace's AgentAPI and the Claude Code behind it; outlives builds."""

    messages: list[Message] = field(default_factory=list)
    status: str = "running"  # AgentAPI's: running | stable
    transport: str = "pty"
    errors: list[dict] = field(default_factory=list)  # {level, message, time}
    up: bool = False  # AgentAPI listens (the app is ready and the process not stopped)
    down: bool = False  # stopped through the control API
    booted: bool = False  # the first prompt was handed over
    script: Script | None = None  # chosen through the control API
    turn: Turn | None = None
    epoch: int = 0  # bumped whenever pending timers must do nothing
    keys: str = ""  # typed, not yet submitted
    reporter: Reporter = field(default_factory=Reporter)
    sinks: list[Sink] = field(default_factory=list)

    def subscribe(self, sink: Sink) -> list[tuple[str, dict]]:
        """Register an event sink; returns AgentAPI's replay of the current state."""
        self.sinks.append(sink)
        return ([("message_update", message_update(m)) for m in self.messages]
                + [("status_change", {"status": self.status, "agent_type": "claude"})]
                + [("agent_error", dict(e)) for e in self.errors])

    def unsubscribe(self, sink: Sink) -> None:
        if sink in self.sinks:
            self.sinks.remove(sink)

    def emit(self, event: str, data: dict) -> None:
        for sink in list(self.sinks):
            sink((event, data))

    def hang_up(self) -> None:
        """End every event stream: AgentAPI went away."""
        for sink in list(self.sinks):
            sink(None)
        self.sinks.clear()


def message_update(m: Message) -> dict:
    """The `message_update` event's payload (`message`, not `content`, as AgentAPI names it)."""
    return {"id": m.id, "role": m.role, "message": m.content, "time": m.time}
