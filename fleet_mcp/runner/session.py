"""The one Claude Code conversation a runner owns, driven through claude-agent-sdk's ClaudeSDKClient.

`Conversation.run()` keeps a client connected (resuming the saved session), turns the SDK's messages
into the runner's state, conversation and results, and holds permission requests until they are
answered or time out. The HTTP layer calls `send`, `interrupt` and `answer`; every change is saved.
The SDK is imported only when the session starts (here and in `sdk.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..runner_wire import ANSWERED_SHOWN, Message, Result, State, TurnEnd
from . import sdk, typed
from .changes import ChangeLog, line
from .prompts import Conflict, Pending, Prompts
from .report import Reporter, pull_request_url
from .settings import RunnerSettings
from .store import Saved, Store, latest_output, latest_task, now_iso

__all__ = ["Conversation"]

log = logging.getLogger("fleet_mcp.runner")
INTERRUPT_WAIT_S = 10.0
INTERRUPT_AGAIN_S = 1.0  # how often an interrupt is sent again while its turn goes on (`_interrupt_again`)
RUNNING = ("working", "needs_input")
LOST_SESSION = "No conversation found with session ID"  # Claude Code's words when `resume` names no transcript


class Conversation:
    """State, conversation and results of the runner's Claude Code session."""

    def __init__(self, settings: RunnerSettings, store: Store, reporter: Reporter) -> None:
        self.settings = settings
        self.store = store
        self.reporter = reporter
        self.saved: Saved = store.load()
        self.changes = ChangeLog(settings.workdir, settings.state_path.parent)
        self.state = "starting"
        self.since = now_iso()
        self.error: str | None = None
        self.prompts = Prompts()
        self.current_task: str | None = latest_task(self.saved)
        self.last_activity_at: str | None = None
        self._client: Any = None
        self._started_at = ""
        self._interrupted = False
        self._turn_over = asyncio.Event()
        self._retry = asyncio.Event()
        self._closing = asyncio.Event()
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._schema: dict[str, Any] | None = None  # the result schema Claude Code was connected with
        self._turn_schema: dict[str, Any] | None = None  # the running turn's
        self._reader: asyncio.Task[Any] | None = None
        self._switching = False
        self._tool_error: str | None = None
        self._sent = False  # whether Claude Code has the running turn's prompt

    # --- what the HTTP layer reads and does --------------------------------------------------------------------

    def state_now(self) -> State:
        """`GET /state`, and the state every write answers with; the last turn at a glance at its end: how it
        ended, its cost, and a line on what it changed."""
        last = self.saved.results[-1] if self.saved.results else None
        outcome: TurnEnd | None = None if last is None else "interrupted" if last.interrupted \
            else "failed" if last.is_error else "succeeded"
        return State(state=self.state, since=self.since, session_id=self.saved.session_id, model=self.saved.model,
                     current_task=self.current_task,
                     latest_output=latest_output(self.saved.messages),  # the agent's words: data for a glance
                     pending=self.prompts.pending.shown() if self.prompts.pending else None,
                     answered=self.prompts.answered[-ANSWERED_SHOWN:], error=self.error,
                     queued=len(self.saved.queue), turns=self.saved.turns, cost_usd=round(self.saved.cost_usd, 6),
                     last_activity_at=self.last_activity_at, last_turn=outcome,
                     last_cost_usd=last.total_cost_usd if last else None,
                     changes_summary=line(last.changes) if last else None)

    async def send(self, content: str, if_busy: str, result_schema: dict[str, Any] | None = None) -> bool:
        """Starts a turn with `content`, or queues it; True when queued. Raises Conflict when refused.
        With `result_schema` the turn must end in an object of that shape (typed.py)."""
        item: str | dict[str, Any] = (content if result_schema is None
                                      else {"content": content, "result_schema": result_schema})
        if self.state == "idle" and not self.saved.queue:
            self.saved.queue.append(item)
            self._next()  # starts it, or reconnects first with the schema it asks for
            return False
        if if_busy == "queue" or self.state not in RUNNING:  # starting or error: delivered once connected
            self.saved.queue.append(item)
            self._save()
            if self.state not in RUNNING:  # Coder (and so every list) sees the work coming before it starts
                self.reporter.working(content)
            self._retry.set()  # from the error state, a new message is the cue to reconnect
            return True
        if if_busy == "reject":
            raise Conflict("busy", f"the agent is {self.state}; send with if_busy=queue or if_busy=interrupt")
        self.saved.queue.insert(0, item)  # interrupt: this message goes next
        self._save()
        try:
            await self.interrupt()
        except Conflict:
            self.saved.queue.remove(item)  # refused: nothing changed
            self._save()
            raise
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._turn_over.wait(), INTERRUPT_WAIT_S)
        return item in self.saved.queue

    async def interrupt(self) -> None:
        """The SDK's interrupt of the running turn; Conflict when none runs."""
        if self.state not in RUNNING or self._client is None:
            raise Conflict("not_running", f"no turn is running (the agent is {self.state})")
        self._interrupted = True
        self.prompts.deny("Interrupted by the fleet.", "interrupt")
        if not self._sent:
            return  # `_query` ends the turn before Claude Code hears it
        try:
            await asyncio.wait_for(self._client.interrupt(), INTERRUPT_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - the turn goes on; say why the interrupt did not land
            raise Conflict("interrupt_failed",
                           f"Claude Code did not take the interrupt: {type(exc).__name__}") from None
        again = asyncio.create_task(self._interrupt_again(self._turn_over))
        self._tasks.add(again)
        again.add_done_callback(self._tasks.discard)

    async def _interrupt_again(self, over: asyncio.Event) -> None:
        """Claude Code drops an interrupt that reaches it before the prompt sent just ahead of it has begun a
        turn (the turn then runs on): while this turn goes on, up to INTERRUPT_WAIT_S, the interrupt is sent
        again each INTERRUPT_AGAIN_S. A new turn clears `_interrupted` and ends the asking."""
        loop = asyncio.get_running_loop()
        end = loop.time() + INTERRUPT_WAIT_S
        while loop.time() < end:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(over.wait(), INTERRUPT_AGAIN_S)
                return
            if (client := self._client) is None or not self._interrupted:
                return
            with contextlib.suppress(Exception):  # the first one was taken; a later one is only a second try
                await asyncio.wait_for(client.interrupt(), INTERRUPT_AGAIN_S)

    def answer(self, allow: bool, message: str, prompt_id: str, digest: str, allow_truncated: bool = False) -> Pending:
        """Allows or denies the pending tool call, only as its sender was shown it (`Prompts.answer`)."""
        answered = self.prompts.answer(allow, message, prompt_id, digest, allow_truncated)
        self._set_state("working")
        return answered

    # --- the SDK session --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keeps Claude Code connected until `close()`; on a failure, waits in `error` for a new message."""
        from claude_agent_sdk import ClaudeSDKClient

        while not self._closing.is_set():
            self._retry.clear()
            try:
                spec = self.settings.first_prompt()
                if spec and not self.saved.session_id and not self.saved.spec_sent:
                    self.saved.spec_sent = True  # once: never again, even if this turn dies
                    schema = self.settings.first_schema()
                    self.saved.queue.insert(0, spec if schema is None else {"content": spec,
                                                                           "result_schema": schema})
                # Claude Code takes a result schema per session: connect with the next task's.
                schema = typed.schema_of(self.saved.queue[0]) if self.saved.queue else None
                options = sdk.options(self.settings, self.saved.session_id, self._can_use_tool, schema)
                async with ClaudeSDKClient(options) as client:
                    self._client, self._schema, self.error = client, schema, None
                    self._set_state("idle")
                    self._next()
                    if self.state == "idle":  # nothing to do: every list learns from Coder that it is ready
                        self.reporter.ready()
                    # The SDK closes the CLI well only when its own task is not cancelled: stop reading, then leave.
                    reader = self._reader = asyncio.create_task(self._read(client))
                    if await self._until_closing(reader):
                        return
                if self._switching:  # left to connect again with the next task's result schema
                    self._switching = False
                    self.saved.session_cost_usd = 0.0  # a new Claude Code process counts its cost afresh
                    continue
                raise ConnectionError("Claude Code exited")
            except Exception as exc:  # noqa: BLE001 - any SDK or CLI failure: report it, wait for a retry
                self._client = None
                self.prompts.drop()
                if self.saved.session_id and LOST_SESSION in str(exc):
                    # Claude Code's transcript is gone (a new HOME?): a new conversation beats none at all.
                    log.warning("session %s is gone from Claude Code; starting a new one", self.saved.session_id)
                    self.saved.session_id = None
                    self.saved.session_cost_usd = 0.0
                    self._save()
                    continue
                self.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                log.warning("Claude Code session failed: %s", self.error)
                self._set_state("error")
                self._turn_over.set()
                await self._until_closing(asyncio.create_task(self._retry.wait()))
                self._set_state("starting")
            finally:
                self._client = None

    async def close(self) -> None:
        """Interrupts a running turn (so Claude Code can exit at once), then ends `run()`."""
        self._stopping = True
        if self.state in RUNNING and self._client is not None:
            with contextlib.suppress(Conflict):
                await self.interrupt()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turn_over.wait(), 3)
        self._closing.set()

    async def _read(self, client: Any) -> None:
        async for message in client.receive_messages():
            if sdk.is_result(message) and self.state in RUNNING:
                await self._end_turn(self._result(message))
            else:
                self._on_message(message)

    async def _end_turn(self, result: Result) -> None:
        """Records what the turn changed in the repository (before anyone sees it idle), then ends it."""
        result.changes, result.changes_unavailable = await self.changes.finish()
        self._finish(result)

    async def _until_closing(self, task: asyncio.Task[Any]) -> bool:
        """Waits for `task` or `close()`; True (and `task` cancelled) when closing came first."""
        closing = asyncio.create_task(self._closing.wait())
        await asyncio.wait({task, closing}, return_when=asyncio.FIRST_COMPLETED)
        closing.cancel()
        if task.done():
            if not task.cancelled():  # cancelled: `_switch` ended the reading, not a failure
                task.result()
            return False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True

    def _begin(self, item: str | dict[str, Any]) -> None:
        """Marks a turn started (synchronously, so no second message slips in) and sends it."""
        prompt, self._turn_schema, self._tool_error = typed.content(item), typed.schema_of(item), None
        self._sent = False
        self.current_task = prompt
        self._started_at = now_iso()
        self._interrupted = False
        self._turn_over.clear()
        self._add("user", prompt)
        self._set_state("working")
        self.reporter.working(prompt)
        task = asyncio.create_task(self._query(prompt))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _query(self, prompt: str) -> None:
        try:
            await self.changes.begin()  # before Claude Code hears the prompt, so the start point is clean
            if self._interrupted:  # while the start was noted: Claude Code never hears this turn
                self._finish(self._unsent(prompt, f"Interrupted: {prompt.splitlines()[0]}", "error_during_execution",
                                          interrupted=True))
                return
            self._sent = True
            await self._client.query(prompt)
        except Exception as exc:  # noqa: BLE001 - the turn fails with a result instead of hanging
            log.warning("could not send the prompt to Claude Code: %s", type(exc).__name__)
            self._finish(self._unsent(prompt, f"Could not send the prompt: {type(exc).__name__}", "send_failed"))

    def _unsent(self, prompt: str, text: str, subtype: str, interrupted: bool = False) -> Result:
        """The result of a turn whose prompt never reached Claude Code."""
        return Result(task=prompt, text=text, is_error=True, subtype=subtype, num_turns=0, duration_ms=0,
                      total_cost_usd=None, session_id=self.saved.session_id or "", started_at=self._started_at,
                      finished_at=now_iso(), pull_request_url=None, interrupted=interrupted,
                      changes_unavailable="the prompt did not reach Claude Code")

    def _next(self) -> None:
        if self.state == "idle" and self.saved.queue and self._client is not None and not self._stopping:
            if typed.schema_of(self.saved.queue[0]) != self._schema:
                self._switch()
            else:
                self._begin(self.saved.queue.pop(0))

    def _switch(self) -> None:
        """Claude Code takes a result schema per session: leave it, to resume it with the next task's."""
        if not self._switching and self._reader is not None:
            self._switching = True
            self._set_state("starting")
            self.reporter.working(typed.content(self.saved.queue[0]))  # the task is under way: no wait ends here
            self._reader.cancel()

    def _on_message(self, message: Any) -> None:
        self.last_activity_at = now_iso()
        if (init := sdk.init_info(message)) is not None:
            self.saved.session_id = init.get("session_id") or self.saved.session_id
            self.saved.model = init.get("model") or self.saved.model
            self._save()
        elif sdk.is_result(message):
            self._finish(self._result(message))
        else:
            for role, content in sdk.entries(message):
                if role == "tool_result" and content.startswith("[error] "):
                    self._tool_error = content.removeprefix("[error] ")[:500]  # why a typed answer was refused
                self._add(role, content)

    def _result(self, m: Any) -> Result:
        # An interrupted turn's result holds Claude Code's internal diagnostics, not words for a person.
        interrupted = f"Interrupted: {(self.current_task or '').splitlines()[0] if self.current_task else 'the turn'}"
        text = interrupted if self._interrupted else m.result or "; ".join(m.errors or [])
        cost = None
        if m.total_cost_usd is not None:  # the SDK reports the session's running total: a turn costs the difference
            before = self.saved.session_cost_usd
            cost = m.total_cost_usd - before if m.total_cost_usd >= before else m.total_cost_usd
            self.saved.session_cost_usd = m.total_cost_usd
        self.saved.session_id = m.session_id or self.saved.session_id
        structured, is_error, subtype = None, bool(m.is_error), m.subtype
        if self._turn_schema is not None and not self._interrupted:
            structured, failed = typed.outcome(self._turn_schema, getattr(m, "structured_output", None), subtype,
                                               self._tool_error)
            if failed:
                text, is_error, subtype = failed, True, subtype if is_error else typed.FAILED
        return Result(task=self.current_task or "", text=text, is_error=is_error, subtype=subtype,
                      num_turns=m.num_turns, duration_ms=m.duration_ms, total_cost_usd=cost,
                      session_id=m.session_id, started_at=self._started_at or now_iso(), finished_at=now_iso(),
                      pull_request_url=pull_request_url(text), interrupted=self._interrupted, structured=structured)

    def _finish(self, result: Result) -> None:
        if self.state not in RUNNING:
            return  # a result for a turn already given up on
        self.prompts.drop()
        self.saved.results.append(result)
        self.saved.turns += 1
        self.saved.cost_usd += result.total_cost_usd or 0.0
        self._set_state("idle")
        more = bool(self.saved.queue) and self._client is not None and not self._stopping
        self.reporter.finished(result.text, result.is_error, result.pull_request_url, more=more,
                               interrupted=result.interrupted)
        self._turn_over.set()
        self._next()

    async def _can_use_tool(self, tool: str, tool_input: dict[str, Any], context: Any) -> Any:
        summary = sdk.summarize(tool, tool_input)
        pending = self.prompts.ask(tool, tool_input, summary)
        self._set_state("needs_input")
        self.reporter.needs_input(pending.id, tool, summary, pending.since)
        allow, message = await self.prompts.wait(pending, self.settings.permission_timeout_s)
        if self.state == "needs_input":
            self._set_state("working")
        if self.state == "working" and not self._interrupted:
            self.reporter.working(self.current_task or "")
        return sdk.decision(allow, message, self._interrupted)

    def _add(self, role: str, content: str) -> None:
        self.saved.messages.append(Message(id=self.saved.next_message_id, role=role, content=content,
                                           time=now_iso()))
        self.saved.next_message_id += 1
        self._save()

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state, self.since = state, now_iso()
        self._save()

    def _save(self) -> None:
        self.store.save(self.saved)
