"""Watching many agents at once: wait on a group without polling from the orchestrator, and glance at many.

A wait reads the fleet with one workspace listing per poll interval, whatever
the group's size, and every wait of the server shares that listing: ten
orchestrator calls waiting cost what one does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import get_args

from ..coder.schemas import Workspace, WorkspacesPage
from ..drivers import Driver, Live, Message, Unreachable, same_reach
from ..errors import bad_request, not_found, unavailable
from ..models import AgentGlance, AgentGlances, Condition, WaitedAgent, WaitResult
from ..times import iso
from .agents import Fleet
from .answers import prompt, with_screen_prompt
from .asks import confirmed_all, marked, read_idle
from .background import Watch, offered
from .rate import Meter
from .reads import own_problem, prefetch
from .rules import FLEET_QUERY, valid_name
from .status import Snapshot, Status, list_status, live_status, reported_task

__all__ = ["CONDITIONS", "MAX_GLANCES", "MAX_WAIT_S", "Listing", "Waits"]

CONDITIONS: tuple[Condition, ...] = get_args(Condition)
MAX_WAIT_S = 1_800.0
MAX_GLANCES = 50
Details = tuple[Live | None, str | None, list[Message] | None]
PREVIEW_CHARS = 300
Progress = Callable[[float, float, str], Awaitable[None]]


class Listing:
    """The fleet's workspace listing, fetched at most once per `max_age` however many callers ask (a fetch
    is given the deadline of the caller that began it)."""

    def __init__(self, fetch: Callable[[float | None], Awaitable[WorkspacesPage]]) -> None:
        self._fetch = fetch
        self._page: WorkspacesPage | None = None
        self.asked_at = float("-inf")  # loop time the held page was asked for: what it is as old as
        self._inflight: asyncio.Future[WorkspacesPage] | None = None

    async def get(self, max_age: float, *, deadline: float | None) -> WorkspacesPage:
        loop = asyncio.get_running_loop()
        if self._page is not None and loop.time() - self.asked_at < max_age:
            return self._page
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh(deadline))
        # Shielded: one caller going away (a cancelled wait) must not cancel the others' listing.
        return await asyncio.shield(self._inflight)

    async def _refresh(self, deadline: float | None) -> WorkspacesPage:
        try:
            asked = asyncio.get_running_loop().time()
            page = await self._fetch(deadline)
            self._page, self.asked_at = page, asked
            return page
        finally:
            self._inflight = None


def _met(status: Status, until: set[Condition]) -> bool:
    return status.value in until or ("failed" in until and status.last_turn == "failed" and status.value == "idle")


class Waits:
    """wait_for_agents and show_agents."""

    def __init__(self, fleet: Fleet, meter: Meter | None = None, stopping: asyncio.Event | None = None) -> None:
        self.fleet = fleet
        self.meter = meter if meter is not None else Meter(fleet.settings.rate_share)
        self.stopping = stopping if stopping is not None else asyncio.Event()  # set when the server stops
        self.listing = Listing(lambda deadline: fleet.client.workspaces(FLEET_QUERY, deadline=deadline))

    async def wait(self, names: list[str], until: Sequence[Condition], mode: str, timeout_s: float,
                   progress: Progress, *, deadline: float | None) -> WaitResult:
        names = _names(names)
        if not until or any(u not in CONDITIONS for u in until):
            raise bad_request(f"until must name one or more of {', '.join(CONDITIONS)}.", field="until")
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise bad_request(f"timeout_s must be between 0 and {MAX_WAIT_S:.0f}.", field="timeout_s")
        self.meter.admit("Another wait")
        settings = self.fleet.settings
        interval = settings.wait_poll_interval_s
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Names are checked against now: an agent just created counts.
        page = await self.listing.get(max_age=0, deadline=deadline)
        known = {ws.name.lower(): ws for ws in page.workspaces}
        missing = [n for n in names if n.lower() not in known]
        if missing:
            raise not_found(f"No agent named {missing[0]!r}.", agent_names=missing)
        wanted, last_said = set(until), float("-inf")
        ends = started + timeout_s
        if (handover := offered.get()) is not None and timeout_s > 0:
            agents, met, done = await self._look(names, page, wanted, mode, deadline)
            if not done:  # the caller takes tasks: the wait goes on in the background, one look per tasks/get
                now = time.time()
                handover.watch = Watch("wait", tuple(names), tuple(until), mode, now, now + timeout_s)  # type: ignore[arg-type]
                return self._answer(agents, met, False, 0.0, until, mode)
        while True:
            agents, met, done = await self._look(names, page, wanted, mode, deadline)
            waited = loop.time() - started
            if done or waited >= timeout_s:
                return self._answer(agents, met, not done, waited, until, mode)
            if loop.time() - last_said >= settings.progress_interval_s:
                last_said = loop.time()
                await progress(len(met), len(agents), _waiting(met, agents, until, waited, timeout_s))
            # Polls start one interval apart (not an interval after the last answer): a change is seen by the
            # next listing asked at most one interval after it. Progress keeps its own beat in between.
            next_poll = self.listing.asked_at + interval
            await self._pause(max(0.0, min(next_poll, last_said + settings.progress_interval_s, ends)
                                  - loop.time()), loop.time() - started)
            if loop.time() < min(next_poll, ends):
                continue  # woken to say progress: the listing is still young
            if self.meter.free_in() > max(0.0, ends - loop.time()):
                continue  # no poll fits in this user's rate share before the timeout: answer what was last seen
            await self.meter.room()  # polls stay within this user's share of Coder's rate limit
            page = await self.listing.get(max_age=interval, deadline=deadline)

    async def look(self, watch: Watch, *, deadline: float | None) -> tuple[WaitResult | None, list[WaitedAgent], str]:
        """One look at a background wait (`background.Watch`): its answer when over (met, or past its end: what
        the blocking wait answers then), else None; the agents as seen, and what to say meanwhile. The listing
        is shared with every other wait and look of this user, and at most one poll interval old."""
        # Over this user's share of Coder's rate limit, a look answers from the listing last fetched.
        fresh = self.fleet.settings.wait_poll_interval_s if self.meter.free_in() <= 0 else float("inf")
        page = await self.listing.get(max_age=fresh, deadline=deadline)
        agents, met, done = await self._look(list(watch.names), page, set(watch.until), watch.mode, deadline)
        now = time.time()
        waited, timeout_s = max(0.0, now - watch.started), max(0.0, watch.ends - watch.started)
        if done or now >= watch.ends:
            return self._answer(agents, met, not done, waited, watch.until, watch.mode), agents, ""
        return None, agents, _waiting(met, agents, watch.until, waited, timeout_s)

    async def _look(self, names: list[str], page: WorkspacesPage, wanted: set[Condition], mode: str,
                    deadline: float | None) -> tuple[list[WaitedAgent], list[str], bool]:
        by_name = {ws.name.lower(): ws for ws in page.workspaces}
        agents = await self._confirmed([self._waited(n, by_name.get(n.lower()), wanted) for n in names], by_name,
                                       wanted, "needs_input", deadline)
        met, done = _tally(agents, mode)
        if done:  # about to answer: an agent read idle from Coder is idle only if its runner says so (asks.py)
            agents = await self._confirmed(agents, by_name, wanted, "idle", deadline)
            met, done = _tally(agents, mode)
        return agents, met, done

    async def _pause(self, seconds: float, waited: float) -> None:
        """Sleep between polls; a server stopping (a restart, a redeploy) cuts the wait with `unavailable` at
        once rather than holding its shutdown or dropping the connection: the caller waits again elsewhere."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except TimeoutError:
            return
        raise unavailable(f"This server is stopping (a restart or a redeploy) and ended the wait after {waited:.0f} "
                          "s; nothing changed. Call wait_for_agents again: another replica, or this server once "
                          "restarted, answers it.", retry_after_s=1, waited_s=round(waited, 2))

    async def _confirmed(self, agents: list[WaitedAgent], by_name: dict[str, Workspace], until: set[Condition],
                         read: str, deadline: float | None) -> list[WaitedAgent]:
        """The runner agents read `read` from the listing, as their runners say: a prompt, and whether one waits
        at all, never from the listing's mark alone, which the agent can post itself; idle never from statuses
        that have not caught up with a task the runner took (asks.py)."""
        found = [(i, Snapshot.of(ws, self.fleet.slugs)) for i, a in enumerate(agents)
                 if a.status == read and (a.met or read != "idle") and (ws := by_name.get(a.name.lower())) is not None]
        statuses = await confirmed_all(self.fleet, [(snap, list_status(snap)) for _, snap in found],
                                       deadline=deadline, which=marked if read == "needs_input" else read_idle)
        for (i, snap), status in zip(found, statuses, strict=True):
            agents[i] = self._of(snap.workspace, status, until)
        return agents

    def _waited(self, name: str, ws: Workspace | None, until: set[Condition]) -> WaitedAgent:
        if ws is None:
            return WaitedAgent(name=name, status="deleted", met=False)
        try:
            status = list_status(Snapshot.of(ws, self.fleet.slugs))
        except Exception as exc:  # noqa: BLE001 - one agent's reports cost its own entry, not the wait
            return WaitedAgent(name=ws.name, status="unknown", met=False, problem=own_problem(ws.name, exc).message)
        return self._of(ws, status, until)

    @staticmethod
    def _of(ws: Workspace, status: Status, until: set[Condition]) -> WaitedAgent:
        return WaitedAgent(name=ws.name, met=_met(status, until), status=status.value,
                           status_since=iso(status.since), last_turn=status.last_turn,
                           last_turn_error=status.last_turn_error,
                           pending=prompt(status.pending) if status.value == "needs_input" else None)

    @staticmethod
    def _answer(agents: list[WaitedAgent], met: list[str], timed_out: bool, waited: float, until: Sequence[str],
                mode: str) -> WaitResult:
        condition = "/".join(until)
        if timed_out:
            message = f"Timed out after {waited:.0f} s: {len(met)} of {len(agents)} reached {condition}."
        elif mode == "any" or len(met) == len(agents):
            message = f"{len(met)} of {len(agents)} reached {condition}."
        else:
            message = f"{len(met)} of {len(agents)} reached {condition}; the others are gone."
        return WaitResult(agents=agents, met=met, timed_out=timed_out, waited_s=round(waited, 2), message=message)

    async def glance(self, names: list[str], *, deadline: float | None) -> AgentGlances:
        names = _names(names, most=MAX_GLANCES)
        # The agents last seen ready are asked along with the listing (one round trip, not two); what the
        # listing shows changed since (stopped, rebuilt elsewhere) is asked again or left out.
        known = {n: d for n in names if (d := self.fleet.remembered(n)) is not None}
        with prefetch({n: self._details(d, deadline) for n, d in known.items()}) as begun:
            page = await self.listing.get(max_age=0, deadline=deadline)  # fresh: a glance is a read of now
            by_name = {ws.name.lower(): ws for ws in page.workspaces}
            return AgentGlances(agents=list(await asyncio.gather(*(
                self._own_glance(n, by_name.get(n.lower()), (known[n], begun[n]) if n in known else None, deadline)
                for n in names))))

    async def _own_glance(self, name: str, ws: Workspace | None,
                          early: tuple[Driver, asyncio.Future[Details]] | None, deadline: float | None) -> AgentGlance:
        """One agent's glance; whatever fails in reading it is its own entry, the others are answered."""
        try:
            return await self._glance(name, ws, early, deadline)
        except Exception as exc:  # noqa: BLE001 - never the call's: the agent's entry says what failed
            error = own_problem(ws.name if ws else name, exc)
            return AgentGlance(name=ws.name if ws else name, problem=error.message,
                               error={"error": error.error, "message": error.message, "details": error.details})

    async def _glance(self, name: str, ws: Workspace | None, early: tuple[Driver, asyncio.Future[Details]] | None,
                      deadline: float | None) -> AgentGlance:
        if ws is None:
            self.fleet.remember(name, None)
            error = not_found(f"No agent named {name!r}.", agent_name=name)
            return AgentGlance(name=name, error={"error": error.error, "message": error.message,
                                                 "details": error.details})
        seen = Snapshot.of(ws, self.fleet.slugs)
        task = reported_task(seen)
        driver = await self.fleet.keyed_driver(seen, deadline=deadline)
        self.fleet.remember(ws.name, driver)
        if driver is None:
            status = list_status(seen)
            return AgentGlance(name=ws.name, status=status.value, status_source=status.source,
                               workspace_status=ws.latest_build.status or "pending", current_task=task,
                               problem=status.problem)
        reused = early[1] if early is not None and same_reach(early[0], driver) else None
        live, unreachable, messages = await (reused or self._details(driver, deadline))
        if driver.kind == "runner":  # only the runner says live what the reports cannot: a pending permission
            status = live_status(replace(seen, live=live, unreachable=unreachable))
        elif unreachable is not None:
            status = Status("offline", unreachable, "driver")
        else:  # AgentAPI's /status says no more than its reporter told Coder: one request an agent, not two
            status = list_status(seen)
        status = with_screen_prompt(status, driver, messages)
        if driver.kind == "runner":  # its /state carries the task and the newest output: no conversation asked
            current = (live.current_task if live else None) or task
            output = _cut(live.latest_output) if live else None
        else:
            asked = [m.content for m in messages or [] if m.role == "user"]
            current, output = (asked[-1] if asked and messages is not None else task), _preview(messages)
        return AgentGlance(name=ws.name, status=status.value, status_source=status.source,
                           workspace_status=ws.latest_build.status or "pending", current_task=current,
                           problem=status.problem, latest_output=output,
                           last_turn=(live.last_turn if live and live.last_turn else status.last_turn),
                           last_turn_cost_usd=live.last_cost_usd if live else None,
                           changes_summary=live.changes_summary if live else None,
                           pending=prompt(status.pending) if status.value == "needs_input" else None)

    async def _details(self, driver: Driver, deadline: float | None) -> Details:
        """(live state, why the agent could not be reached, conversation) as a glance needs them: the runner's
        live state alone (one request), AgentAPI's conversation alone."""
        if driver.kind == "runner":
            live, unreachable = await self.fleet.live(driver, deadline=deadline)
            return live, unreachable, None
        try:
            return None, None, await driver.conversation(deadline=deadline)
        except Unreachable as exc:
            return None, str(exc), None


def _tally(agents: list[WaitedAgent], mode: str) -> tuple[list[str], bool]:
    """The agents met, and whether the wait is over: any met, or all met or gone."""
    met = [a.name for a in agents if a.met]
    gone = [a.name for a in agents if a.status == "deleted"]
    return met, bool(met) if mode == "any" else len(met) + len(gone) == len(agents)


def _waiting(met: list[str], agents: list[WaitedAgent], until: Sequence[str], waited: float, timeout_s: float) -> str:
    noun = "agent" if len(agents) == 1 else "agents"
    return f"{len(met)} of {len(agents)} {noun} reached {'/'.join(until)}; waiting ({waited:.0f} s of {timeout_s:g} s)"


def _preview(messages: list[Message] | None) -> str | None:
    return _cut(next((m.content for m in reversed(messages or []) if m.role != "user" and m.content.strip()), None))


def _cut(text: str | None) -> str | None:
    """The agent's own words, stripped, their last PREVIEW_CHARS characters: data, however long it wrote."""
    text = (text or "").strip()
    if not text:
        return None
    return text if len(text) <= PREVIEW_CHARS else "…" + text[-(PREVIEW_CHARS - 1):]


def _names(names: list[str], most: int = 100) -> list[str]:
    if not names:
        raise bad_request("Name at least one agent.", field="agent_names")
    if len(names) > most:
        raise bad_request(f"At most {most} agents at once.", field="agent_names")
    unique = list(dict.fromkeys(names))
    bad = [n for n in unique if not valid_name(n)]
    if bad:
        raise not_found(f"No agent named {bad[0][:40]!r}.", agent_names=[b[:40] for b in bad])
    return unique

