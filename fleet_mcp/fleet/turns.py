"""Turns of an agent's conversation: give a task, interrupt, answer what it waits on, read the result."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ..coder import errors as ce
from ..deadlines import sooner
from ..drivers import (
    Answered,
    Busy,
    Driver,
    DriverError,
    DriverKind,
    IfBusy,
    Live,
    NothingPending,
    NotSupported,
    Pending,
    StalePrompt,
    TurnResult,
    Unkeyed,
    Unreachable,
    same_reach,
    screen_prompt,
)
from ..drivers.keys import SECRET_SETTING
from ..errors import FleetError, bad_request, conflict, unavailable
from ..models import AgentDiff, AnswerResult, DiffScope, LastTurn, Task, TaskResult, TurnOutcome
from ..times import iso, now_iso
from .agents import Fleet, why_unreachable
from .answers import prompt, with_screen_prompt
from .polling import poll_until
from .reads import prefetch, quietly
from .rules import PR_LINK, TASK, check_repository_path, check_result_schema, check_text
from .status import Snapshot, live_status

__all__ = ["DIFF_PAGE_MAX", "FILES_SHOWN", "RESULT_CHARS", "Turns", "refused"]

RESULT_CHARS = 4_000
FILES_SHOWN = 100  # of a turn's changed files in get_agent_result; files_total counts them all
DIFF_PAGE_MAX = 50
_BUDGETS = {"error_max_turns": "Stopped: the turn reached the agent's max_turns budget.",
            "error_max_budget_usd": "Stopped: the turn reached the agent's max_cost_usd budget."}


class Turns:
    """What an orchestrator does with an agent's conversation."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    async def start(self, name: str, description: str, if_busy: IfBusy = "reject",
                    result_schema: dict[str, Any] | None = None, *, deadline: float | None) -> TaskResult:
        check_text("task_description", description)
        if result_schema is not None:
            check_result_schema(result_schema)
        ws, driver, live = await self.fleet.ready(name, deadline=deadline)
        if result_schema is not None and driver.kind != "runner":
            raise bad_request(f"Agent {name!r} runs on AgentAPI, which cannot give a typed answer: result_schema "
                              "needs a runner agent.", field="result_schema", driver=driver.kind)
        if live.state in ("working", "needs_input") and if_busy == "reject":
            raise conflict(f"Agent {name!r} already has a running task. Wait for it (wait_for_agents), or send "
                           "with if_busy='queue' or 'interrupt'.", status="busy")
        try:
            queued = await driver.send(description, if_busy, result_schema, deadline=deadline)
        except (ce.Unavailable, ce.ServerError) as exc:
            if not await _landed(driver, description, deadline):
                raise unavailable(f"The task did not reach agent {name!r} ({exc.message}); it was not sent. "
                                  "Try again.") from None
            queued = False
        except DriverError as exc:
            raise refused(name, exc, if_busy=if_busy) from None
        if driver.kind == "runner":
            self.fleet.took_task(ws)  # lists ask the runner until Coder has its news (asks.read_idle)
        starting = live.state == "starting"  # the runner holds it until Claude Code is up
        queued = queued or starting
        task = Task(message=description, uri="", state="queued" if queued else "working", needs_user_attention=False,
                    created_at=now_iso())
        said = (f"Task queued for agent {name!r}; it starts once Claude Code is up." if starting
                else f"Task queued for agent {name!r}; it starts when the current turn ends." if queued
                else f"Task sent to agent {name!r}.")
        return TaskResult(task=task, agent_status="busy", message=said)

    async def cancel(self, name: str, *, deadline: float | None) -> TaskResult:
        """Interrupt the agent's turn and wait (bounded) for it to stop. Its state, the interrupt and the wait
        share `cancel_wait_s` (the last look `last_probe_s` more), whatever the agent's routes do."""
        fleet, settings = self.fleet, self.fleet.settings
        ws, params = await fleet.find(name, deadline=deadline)
        driver = fleet.driver(ws)
        loop = asyncio.get_running_loop()
        wait = settings.cancel_wait_s
        end = loop.time() + wait
        try:
            async with asyncio.timeout_at(end):
                before, unreachable = await fleet.live(driver, deadline=sooner(deadline, end))
        except TimeoutError:
            raise unavailable(f"Agent {name!r} did not say within {wait:g} s whether it is working; no interrupt "
                              "was sent. Try again.", interrupt_delivered=False) from None
        if driver is None or before is None:
            raise fleet.not_ready(Snapshot.of(ws, fleet.slugs, params, before, unreachable))
        if before.state not in ("working", "needs_input") and before.can_interrupt:
            raise bad_request(f"Agent {name!r} is idle: there is no running task to cancel.", status="idle")
        lost: str | None = None  # why the interrupt's answer was lost, if it was
        try:
            async with asyncio.timeout_at(end):
                await driver.interrupt(deadline=sooner(deadline, end))
        except TimeoutError:
            lost = f"no answer within {wait:g} s"
        except (ce.Unavailable, ce.ServerError) as exc:
            lost = exc.message  # whether it stopped is what the wait below finds out
        except (Unreachable, NotSupported) as exc:
            raise refused(name, exc, driver=driver.kind) from None
        except DriverError:  # the turn ended between our look and the interrupt
            pass
        seen: list[str] = []  # the states the wait read

        async def stopped(by: float) -> Live | None:
            try:
                live = await driver.live(deadline=by)
            except (ce.Unavailable, ce.ServerError, ce.AppProxyError, DriverError):
                return None  # not known yet: asked again until the wait ends
            seen.append(live.state)
            # A queued task starts as soon as the interrupted turn ends: a turn counted since is that end.
            ended = live.turns is not None and before.turns is not None and live.turns > before.turns
            return live if ended or live.state not in ("working", "needs_input") else None

        after = await poll_until(stopped, timeout_s=max(0.0, end - loop.time()), interval_s=settings.poll_interval_s,
                                 deadline=deadline)
        if after is None and lost is not None:
            if seen:
                raise unavailable(f"The interrupt did not take ({lost}): agent {name!r} is still working. Try "
                                  "again.", interrupt_delivered=False)
            raise unavailable(f"Whether the interrupt reached agent {name!r} is not known: its answer was lost "
                              f"({lost}) and the agent's state could not be read within {wait:g} s. Check with "
                              "show_agent before cancelling again.", interrupt_delivered=None)
        statuses = await fleet.statuses(await fleet.client.workspace(ws.id, deadline=deadline), deadline=deadline)
        said = next((s for s in statuses if s.state == "working" and s.message), None)
        interrupted = before.current_task or (said.message if said else "") or "Task"
        task = Task(message=f"{interrupted} - canceled", uri=said.uri if said else "", state="canceled",
                    needs_user_attention=False, created_at=now_iso())
        if after is not None:
            message = "Task canceled."
        elif seen:
            message = "Interrupt delivered; the agent has not stopped yet."
        else:
            message = (f"Interrupt delivered; whether the agent stopped is not known (its state could not be read "
                       f"within {wait:g} s). Check with show_agent.")
        if driver.kind == "runner":  # only the runner queues: say what became of the queue
            message += (f" Queued tasks survive a cancel: {_queued(before.queued)} now runs (cancel_agent_task "
                        "again to stop it too)." if before.queued else " No task was queued.")
        busy = after is None or after.state in ("working", "needs_input")
        return TaskResult(task=task, agent_status="busy" if busy else "idle", message=message)

    async def answer(self, name: str, decision: str, message: str = "", prompt_id: str = "", digest: str = "",
                     allow_truncated: bool = False, *, deadline: float | None) -> AnswerResult:
        """Answer prompt `prompt_id` as it was shown (`digest`), and only it: a prompt answered, gone or not what
        was shown is a `conflict` showing what waits now, whole. A reply lost on the way is resolved by reading
        whether that prompt was answered."""
        if decision not in ("allow", "deny") and not (decision.isdigit() and len(decision) <= 2):
            raise bad_request("decision must be 'allow', 'deny', or the number of a choice on the agent's screen.",
                              field="decision")
        if not prompt_id.strip() or len(prompt_id) > 100:
            raise bad_request("prompt_id must name the prompt you answer, as show_agent, list_agents, show_agents "
                              "or wait_for_agents show it (pending.prompt_id).", field="prompt_id")
        snap, messages = await self.fleet.snapshot(name, conversation=True, deadline=deadline)
        driver = snap.driver
        status = with_screen_prompt(live_status(snap), driver, messages)
        if driver is None or snap.live is None:
            raise self.fleet.not_ready(snap, "so it cannot be answered")
        if driver.kind == "runner" and decision.isdigit():
            raise bad_request("This agent runs on the runner: answer 'allow' or 'deny'.", field="decision")
        if driver.kind == "runner" and not digest.strip():
            raise bad_request("digest must be pending.digest as shown with the prompt (show_agent, show_agents or "
                              "wait_for_agents): an answer approves only what was shown.", field="digest")
        waiting = status.pending if status.value == "needs_input" else None
        if waiting is not None and waiting.id == prompt_id:  # what the runner checks too, said before asking it
            if digest and digest != waiting.digest:
                raise _stale(name, prompt_id, waiting, None, digest)
            if decision == "allow" and waiting.truncated and not allow_truncated and driver.kind == "runner":
                raise bad_request(f"Prompt {prompt_id}'s input is {waiting.chars} characters and was shown cut: "
                                  "allowing it needs allow_truncated=true (you approve what you did not see "
                                  "whole), or deny it.", field="allow_truncated", prompt_id=prompt_id)
        elif driver.kind != "runner":
            raise _stale(name, prompt_id, waiting, None)
        answered: Pending | None = None
        try:
            # The runner checks the prompt itself, atomically.
            answered = await driver.answer(decision, message, prompt_id, digest, allow_truncated, deadline=deadline)
        except (ce.Unavailable, ce.ServerError) as exc:
            await self._landed_answer(name, driver, decision, prompt_id, digest, exc, deadline)
        except StalePrompt as exc:
            raise _stale(name, prompt_id, exc.pending, exc.answered, digest) from None
        except NothingPending:
            raise _stale(name, prompt_id, None, None) from None
        except DriverError as exc:
            raise refused(name, exc) from None
        live, unreachable = await self.fleet.live(driver, deadline=deadline)
        after = live_status(replace(snap, live=live, unreachable=unreachable))
        what = answered or (waiting if waiting is not None and waiting.id == prompt_id else None)
        said = f" ({what.tool} {what.summary!r})" if what is not None else ""
        return AnswerResult(agent_name=name, decision=decision, prompt_id=prompt_id, answered=prompt(what),
                            agent_status=after.value,
                            pending=prompt(after.pending) if after.value == "needs_input" else None,
                            message=f"Answered {decision!r} to prompt {prompt_id}{said}; the agent is {after.value}.")

    async def _landed_answer(self, name: str, driver: Driver, decision: str, prompt_id: str, digest: str,
                             lost: ce.CoderError, deadline: float | None) -> None:
        """After an answer whose reply was lost: returns if it landed, else says what became of the prompt."""
        live, _ = await self.fleet.live(driver, deadline=deadline)
        if driver.kind != "runner":  # AgentAPI keeps no record: the screen says whether the keys landed
            shown = screen_prompt(await quietly(driver.conversation(deadline=deadline)) or [])
            if live is None or (live.state != "working" and shown is not None and shown.id == prompt_id):
                raise unavailable(f"The answer did not reach agent {name!r} ({lost.message}); prompt {prompt_id} "
                                  "still waits. Answer again with the same prompt_id.", prompt_id=prompt_id) from None
            return  # the screen moved on: the keys landed
        if live is None or (live.pending is not None and live.pending.id == prompt_id):
            raise unavailable(f"The answer did not reach agent {name!r} ({lost.message}); prompt {prompt_id} still "
                              "waits. Answer again with the same prompt_id: it can land on no other prompt.",
                              prompt_id=prompt_id) from None
        answered = live.answer_of(prompt_id)
        if answered is not None and answered.by == "fleet" and answered.decision == decision and \
                answered.digest in (None, digest):
            return  # it landed; only the reply was lost
        raise _stale(name, prompt_id, live.pending, answered)

    async def result(self, name: str, *, deadline: float | None) -> TurnOutcome:
        # A runner last seen ready is asked for its results along with the workspace lookup (they carry the
        # turn's changes and typed answer): one round trip, used only if the workspace still says that address.
        known = self.fleet.remembered(name)
        early = {"result": known.last_result(deadline=deadline)} if known is not None and known.kind == "runner" \
            else {}
        with prefetch(early) as begun:
            snap, messages = await self.fleet.snapshot(name, conversation=not begun, deadline=deadline)
            driver = snap.driver
            if driver is None or snap.live is None:
                raise self.fleet.not_ready(snap, "so its result cannot be read")
            if driver.kind == "runner":
                try:
                    last = await (begun["result"] if begun and same_reach(known, driver)
                                  else driver.last_result(deadline=deadline))
                except Unreachable as exc:  # its answer unreadable: the agent's problem, said as for a read
                    raise self.fleet.not_ready(replace(snap, live=None, unreachable=why_unreachable(exc)),
                                               "so its result cannot be read") from None
            elif messages is None:
                messages = await quietly(driver.conversation(deadline=deadline))
        if driver.kind == "runner":
            if last is None:
                raise bad_request(f"Agent {name!r} has not finished a turn yet.", status=live_status(snap).value)
            return _outcome(name, last, snap.live.cost_usd, "runner")  # the runner's sum over every turn
        statuses = await self.fleet.statuses(snap.workspace, deadline=deadline)
        ended = next((s for s in statuses if s.state in ("complete", "failure")), None)
        if ended is None:
            raise bad_request(f"Agent {name!r} has not finished a turn yet.")
        said = [m for m in messages or [] if m.role not in ("user",)]
        # AgentAPI knows nothing of the repository: its results carry no changes.
        asked = [m for m in messages or [] if m.role == "user"]
        pr = ended.uri if ended.uri and PR_LINK.match(ended.uri) else None
        turn = TurnResult(task=asked[-1].content if asked else snap.params.get(TASK, ""),
                          text=said[-1].content if said else ended.message, is_error=ended.state == "failure",
                          finished_at=ended.created_at, pull_request_url=pr,
                          changes_unavailable="AgentAPI agents record no changes (the runner does).")
        return _outcome(name, turn, None, "agentapi")

    async def diff(self, name: str, scope: DiffScope = "task", path: str | None = None, fmt: str = "unified",
                   page: int = 1, page_size: int = 20, *, deadline: float | None) -> AgentDiff:
        """A page of the agent's diff (its last task's, or everything since it was created), by file."""
        if page < 1:
            raise bad_request("page must be 1 or more.", field="page")
        if path is not None:
            path = check_repository_path(path)
        size = min(max(page_size, 1), DIFF_PAGE_MAX)
        ws, params = await self.fleet.find(name, deadline=deadline)
        driver = self.fleet.driver(ws)
        if driver is None:
            raise self.fleet.not_ready(Snapshot.of(ws, self.fleet.slugs, params), "so its diff cannot be read")
        try:
            return await driver.diff(scope, path, fmt, page, size, deadline=deadline)
        except Unreachable as exc:
            raise self.fleet.not_ready(Snapshot.of(ws, self.fleet.slugs, params, None, why_unreachable(exc)),
                                       "so its diff cannot be read") from None
        except NotSupported as exc:
            raise refused(name, exc, driver=driver.kind) from None
        except DriverError as exc:
            raise refused(name, exc, scope=scope, **({"field": "path"} if path else {})) from None


def refused(name: str, exc: DriverError, **details: Any) -> FleetError:
    """What a driver's refusal means to the caller: the one wording of each driver error."""
    if isinstance(exc, Busy):
        return conflict(f"Agent {name!r} already has a running task.", status="busy")
    if isinstance(exc, Unkeyed):  # this server's setting, not the agent
        return unavailable(f"Agent {name!r} cannot be reached by this server: {exc}", setting=SECRET_SETTING)
    if isinstance(exc, Unreachable):
        return bad_request(f"Agent {name!r} is offline: {exc}")
    if isinstance(exc, NothingPending):
        return bad_request(f"Agent {name!r} waits on no answer any more.")
    return bad_request(f"Agent {name!r}: {exc}", **details)


async def _landed(driver: Driver, text: str, deadline: float | None) -> bool:
    """After a send whose answer was lost: is the task in the conversation, running, or queued?"""
    try:
        live, messages = await driver.live(deadline=deadline), await driver.conversation(deadline=deadline)
    except (ce.CoderError, DriverError):
        return False
    recent = [m.content.strip() for m in messages[-4:] if m.role == "user"]
    return text.strip() in recent or (live.current_task or "").strip() == text.strip()


def _outcome(name: str, turn: TurnResult, total: float | None, driver: DriverKind) -> TurnOutcome:
    pr = turn.pull_request_url or (m.group(0) if (m := PR_LINK.search(turn.text)) else None)
    outcome: LastTurn = "interrupted" if turn.interrupted else "failed" if turn.is_error else "succeeded"
    reason = turn.subtype if outcome != "succeeded" and turn.subtype and turn.subtype != "success" else None
    text = turn.text or _BUDGETS.get(reason or "", "")
    changes = turn.changes.model_copy(update={"files": turn.changes.files[:FILES_SHOWN]}) if turn.changes else None
    return TurnOutcome(agent_name=name, task=turn.task or None, outcome=outcome, stop_reason=reason,
                       text=text[:RESULT_CHARS], truncated=len(text) > RESULT_CHARS, pull_request_url=pr,
                       num_turns=turn.num_turns,
                       duration_ms=turn.duration_ms, turn_cost_usd=turn.cost_usd, total_cost_usd=total,
                       finished_at=iso(turn.finished_at), driver=driver,
                       changes=changes, structured=turn.structured,
                       changes_unavailable=None if changes else turn.changes_unavailable or "The runner recorded "
                       "no changes for this turn.")


def _stale(name: str, prompt_id: str, pending: Pending | None, answered: Answered | None,
           digest: str = "") -> Exception:
    """`conflict`: prompt `prompt_id` does not wait (any more), or not as it was shown (`digest`); what waits
    now, whole, and how that prompt was answered if known."""
    if pending is not None and pending.id == prompt_id:
        became = ("it waits, but not as you were shown it: what you saw did not come from the agent's program, or "
                  "changed; read it below and answer with its digest" if digest != pending.digest else
                  "its input was shown cut: allow it with allow_truncated=true, or deny it")
    else:
        became = (f"it was answered {answered.decision!r}" + (f" ({answered.by})" if answered.by != "fleet" else "")
                  + (f" at {iso(answered.at)}" if answered.at else "")) if answered else "it is not pending"
    now = (f"now prompt {pending.id} waits: {pending.tool} {pending.summary!r}" if pending and pending.id else
           "now a prompt waits whose id is not known" if pending else "nothing waits now")
    shown = prompt(pending)
    return conflict(f"Agent {name!r}: prompt {prompt_id} was not answered by this call: {became}; {now}. Nothing "
                    "was sent to the agent.", prompt_id=prompt_id,
                    pending=shown.model_dump() if shown else None,
                    answered=dict(decision=answered.decision, by=answered.by, at=iso(answered.at))
                    if answered else None)


def _queued(count: int) -> str:
    return "the queued task" if count == 1 else f"the first of the {count} queued tasks"
