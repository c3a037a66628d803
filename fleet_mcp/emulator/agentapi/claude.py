"""A scripted Claude Code behind AgentAPI, moved by timers on the emulator's clock.

`ClaudeCode` moves every workspace's `Session`: the first turn starts when the
`ccw` app becomes ready (the spec is Claude's command-line prompt: no `user`
message), later turns start from user messages, raw keys interrupt or answer a
permission prompt, and app statuses are reported as `coder exp mcp server`
reports them (`Reporter`). A stop takes AgentAPI away; a start brings it back
with the conversation kept. No HTTP here.

Scripts come from markers in the prompt, else from the control API, else the
default (finish after 5 s): `[[finish:N]]`, `[[pr]]`, `[[fail]]`, `[[hang]]`,
`[[permission]]`, `[[acp]]`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ..coder.appstatus import record_status
from ..coder.state import Agent, Workspace
from .session import MARKER, Message, Reporter, Script, Session, Turn, message_update

__all__ = ["SLUG", "ClaudeCode", "Refusal"]

SLUG = "ccw"  # the AgentAPI app, as the claude-code module names it
STABLE_AFTER = 0.5  # AgentAPI calls the screen stable once it stops changing
BOOT = 1.0  # a restarted Claude Code settles before AgentAPI turns stable
PR_URL = "https://github.com/example/repo/pull/{}"


class Refusal(Exception):
    """AgentAPI refuses a message (its wording; the HTTP layer answers 500)."""


def _cut(text: str, limit: int) -> str:
    """At most `limit` bytes (Coder counts bytes), ending in '...' when cut."""
    if len(text.encode()) <= limit:
        return text
    return text.encode()[:limit - 3].decode(errors="ignore") + "..."


def _title(prompt: str) -> str:
    text = " ".join(MARKER.sub(" ", prompt).split())
    return _cut("".join(ch for ch in text if ch.isprintable()) or "the task", 100)


class ClaudeCode:
    """Runs every workspace's scripted Claude Code; a `Lifecycle` listener of the backend."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.clock = backend.clock
        self._prs = itertools.count(101)
        backend.lifecycle.listeners.append(self._on_lifecycle)

    def session(self, ws: Workspace) -> Session:
        return self.backend.sessions.setdefault(ws.id, Session())

    def reachable(self, ws: Workspace) -> bool:
        """Whether AgentAPI listens behind the workspace's `ccw` app."""
        s = self.backend.sessions.get(ws.id)
        return bool(s and s.up)

    # --- what the outside does ------------------------------------------------

    def send_user(self, ws: Workspace, content: str) -> None:
        """AgentAPI `POST /message` type user: only when stable, never empty."""
        s = self.session(ws)
        if s.status != "stable":
            raise Refusal("message can only be sent when the agent is waiting for user input")
        text = content.strip()
        if not text:
            raise Refusal("message must not be empty")
        if s.turn:  # a user message is a bracketed paste: its ESC cancels an open prompt
            self._end(s, "  ⎿  Interrupted by user")
        self._begin(ws, s, text, user=True)

    def write_raw(self, ws: Workspace, content: str) -> None:
        """AgentAPI `POST /message` type raw: keystrokes (PTY) or a new prompt (ACP), never recorded."""
        s = self.session(ws)
        if s.transport == "acp":
            text = content.removeprefix("\x1b[200~").removesuffix("\x1b[201~").removeprefix("x\b").strip()
            if text and s.turn is None and s.status == "stable":
                self._begin(ws, s, text, user=False)
            return
        if content.startswith("\x1b[200~"):  # a bracketed paste types text, it does not interrupt
            s.keys += content.removeprefix("\x1b[200~").removesuffix("\x1b[201~")
            return
        for ch in content:
            if ch == "\x1b" and s.turn and s.turn.waiting:  # Claude Code: ESC at a permission prompt says no
                s.keys = ""
                self._answer(ws, s, s.turn, "2")
            elif ch in "\x1b\x03":
                s.keys = ""
                self._interrupt(ws, s)
            elif ch in "\r\n":
                self._enter(ws, s)
            elif ch.isprintable():
                s.keys += ch

    def set_script(self, ws: Workspace, script: Script | None, transport: str | None = None) -> Session:
        s = self.session(ws)
        s.script = script
        if transport or (script and script.acp):
            s.transport = transport or "acp"
        return s

    def inject_error(self, ws: Workspace, message: str, level: str = "error") -> None:
        s = self.session(ws)
        error = {"level": level, "message": message, "time": self.clock.now()}
        s.errors.append(error)
        s.emit("agent_error", dict(error))

    def set_process(self, ws: Workspace, running: bool) -> Session:
        """Stop AgentAPI and Claude Code in a running workspace, or start them again."""
        s = self.session(ws)
        agent = self._agent(ws)
        app = next((a for a in agent.apps if a.slug == SLUG), None) if agent else None
        if not running and s.up:
            s.down = True
            self._stop(s)
        elif running and s.down and app and agent and agent.status == "connected":
            s.down = False
            self._boot(ws, s)
        if app:
            app.health = "healthy" if s.up else "unhealthy"
        return s

    # --- lifecycle ------------------------------------------------------------

    def _on_lifecycle(self, event: str, ws: Workspace) -> None:
        if event == "agent_gone" and ws.id in self.backend.sessions:
            self._stop(self.backend.sessions[ws.id])
        elif event == "app_ready" and (agent := self._agent(ws)) and any(a.slug == SLUG for a in agent.apps):
            s = self.session(ws)
            s.down = False
            self._boot(ws, s)

    def _boot(self, ws: Workspace, s: Session) -> None:
        s.up, s.status, s.keys = True, "running", ""
        s.epoch += 1
        s.reporter = Reporter()  # a fresh `coder exp mcp server` beside a fresh Claude Code
        if not s.booted:
            s.booted = True
            params = dict(ws.latest_build.parameters)
            prompt = params.get("fleet_mcp_agent_spec") or params.get("fleet_mcp_current_task") or ""
            if prompt:
                self._begin(ws, s, prompt, user=False)
            else:
                self._append(s, "agent", "✻ Welcome to Claude Code!")
        if s.turn is None:
            self._later(s, BOOT, lambda: self._status(ws, s, "stable"))
        # The MCP server's watcher connects: AgentAPI's replay becomes its first reports.
        for m in s.messages:
            if m.role == "user":
                self._report(ws, s, "working", message_id=m.id)
        self._report(ws, s, "idle" if s.status == "stable" else "working")

    def _stop(self, s: Session) -> None:
        s.up, s.turn, s.keys = False, None, ""
        s.epoch += 1
        s.hang_up()

    # --- turns ----------------------------------------------------------------

    def _begin(self, ws: Workspace, s: Session, prompt: str, user: bool) -> None:
        script = Script.parse(prompt) or s.script or Script()
        if script.acp:
            s.transport = "acp"
        s.epoch += 1
        title = _title(prompt)
        if user:
            self._report(ws, s, "working", message_id=self._append(s, "user", prompt).id)
            message = self._append(s, "agent", "● On it.")
        elif s.messages and s.messages[-1].role == "agent":  # typed into the screen AgentAPI already shows
            message = s.messages[-1]
            self._grow(s, message, f"\n> {title}\n\n● On it.")
        else:
            message = self._append(s, "agent", f"> {title}\n\n● On it.")
        turn = s.turn = Turn(title, script, message)
        self._status(ws, s, "running")
        n = script.finish
        self._later(s, 0.2 * n, lambda: self._step(ws, s, turn, "● Reading the code...", f"Working on: {title}"))
        if script.permission:
            self._later(s, 0.5 * n, lambda: self._ask(ws, s, turn))
        elif not script.hang:
            self._later(s, 0.6 * n, lambda: self._step(ws, s, turn, "● Making the changes...",
                                                      f"Making changes: {title}"))
            self._later(s, n, lambda: self._finish(ws, s, turn))

    def _step(self, ws: Workspace, s: Session, turn: Turn, line: str, summary: str) -> None:
        self._grow(s, turn.message, "\n" + line)
        self._claude(ws, s, "working", summary)

    def _ask(self, ws: Workspace, s: Session, turn: Turn) -> None:
        self._claude(ws, s, "working", "Waiting for permission")
        self._grow(s, turn.message, "\n● Bash(make test)\n\nDo you want to proceed?\n❯ 1. Yes\n  2. No")
        turn.waiting = True
        self._later(s, STABLE_AFTER, lambda: self._status(ws, s, "stable"))

    def _answer(self, ws: Workspace, s: Session, turn: Turn, choice: str) -> None:
        turn.waiting = False
        s.epoch += 1
        self._status(ws, s, "running")
        if choice == "2":
            self._grow(s, turn.message, "\n  ⎿  Denied: the command was not run.")
            self._claude(ws, s, "failure", _cut(f"Permission denied; stopped: {turn.title}", 160))
            self._end(s)
            self._later(s, STABLE_AFTER, lambda: self._status(ws, s, "stable"))
            return
        self._grow(s, turn.message, "\n  ⎿  Allowed.")
        n = turn.script.finish
        self._later(s, 0.2 * n, lambda: self._step(ws, s, turn, "● Continuing...",
                                                  f"Permission granted, continuing: {turn.title}"))
        self._later(s, 0.5 * n, lambda: self._finish(ws, s, turn))

    def _finish(self, ws: Workspace, s: Session, turn: Turn) -> None:
        link = PR_URL.format(next(self._prs)) if turn.script.pr else ""
        if turn.script.fail:
            state, summary, line = "failure", f"Failed: {turn.title}", "● I could not finish: the tests fail."
        else:
            state = "complete"
            summary = f"Opened a pull request: {turn.title}" if link else f"Done: {turn.title}"
            line = f"● Done. Pull request: {link}" if link else "● Done."
        self._grow(s, turn.message, "\n" + line)
        self._claude(ws, s, state, _cut(summary, 160), link)
        self._end(s)
        self._later(s, STABLE_AFTER, lambda: self._status(ws, s, "stable"))

    def _end(self, s: Session, line: str = "") -> None:
        if s.turn and line:
            self._grow(s, s.turn.message, "\n" + line)
        s.turn = None
        s.epoch += 1

    def _interrupt(self, ws: Workspace, s: Session) -> None:
        if s.turn is None:
            return
        self._end(s, "  ⎿  Interrupted by user")
        self._status(ws, s, "running")  # the screen changes, then settles
        self._later(s, STABLE_AFTER, lambda: self._status(ws, s, "stable"))

    def _enter(self, ws: Workspace, s: Session) -> None:
        keys, s.keys = s.keys.strip(), ""
        if s.turn and s.turn.waiting:
            self._answer(ws, s, s.turn, "2" if keys.endswith("2") else "1")  # Enter takes the highlighted "1"
        elif keys and s.turn is None and s.status == "stable":
            self._begin(ws, s, keys, user=False)

    # --- AgentAPI's state, and what the MCP server makes of it ------------------

    def _append(self, s: Session, role: str, content: str) -> Message:
        message = Message(len(s.messages), role, content, self.clock.now())
        s.messages.append(message)
        s.emit("message_update", message_update(message))
        return message

    def _grow(self, s: Session, message: Message, text: str) -> None:
        message.content += text
        message.time = self.clock.now()
        s.emit("message_update", message_update(message))

    def _status(self, ws: Workspace, s: Session, status: str) -> None:
        if s.status == status:
            return
        s.status = status
        s.emit("status_change", {"status": status, "agent_type": "claude"})
        self._report(ws, s, "idle" if status == "stable" else "working")

    def _claude(self, ws: Workspace, s: Session, state: str, summary: str, link: str = "") -> None:
        # coder_report_task: a self-reported idle is working while AgentAPI watches the screen.
        self._report(ws, s, "working" if state == "idle" else state, summary, link, self_reported=True)

    def _report(self, ws: Workspace, s: Session, state: str, summary: str = "", link: str = "",
                message_id: int | None = None, self_reported: bool = False) -> None:
        report = s.reporter.accept(state, summary, link, message_id, self_reported)
        agent = self._agent(ws)
        app = next((a for a in agent.apps if a.slug == SLUG), None) if agent else None
        if report is None or agent is None or app is None or len(report.summary.encode()) > 160:
            return  # Coder refuses messages over 160 bytes
        # Written as the route would store it, but unsanitized: the scripted summaries carry no markup.
        record_status(self.backend, ws, agent, app, report.state, report.summary, report.link)

    def _later(self, s: Session, delay: float, fn: Callable[[], None]) -> None:
        epoch = s.epoch

        def run() -> None:
            if s.epoch == epoch and s.up:
                fn()

        self.clock.call_later(delay, run)

    @staticmethod
    def _agent(ws: Workspace) -> Agent | None:
        agents = ws.latest_build.agents
        return agents[0] if agents else None
