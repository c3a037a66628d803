"""The fleet's cap (`FLEET_MCP_MAX_AGENTS`), held under concurrency across replicas with no state beyond Coder's.

Check, create, confirm. Before a create, a cheap count (one listing of one workspace: Coder's `count` is the
total) refuses a fleet already at its cap. After it, the create is confirmed: when the fleet (the new
workspace included) is within the cap it stays; when it is over, the fleet's workspaces are ranked by
(`created_at`, `id`), one order every replica sees alike. One ranked past the cap takes itself back at once
(a delete build) and answers `conflict`; one within the cap waits (up to `FLEET_MCP_CREATE_ADOPT_WAIT_S`) for
the ones ranked after it to take themselves back, stays once the fleet is within the cap, and takes itself
back too if it never is.

Why it holds: an agent stays only on a listing, made after its own workspace existed, that held at most
`cap` counting workspaces. Of the agents that stay, the one whose deciding listing came last saw every
other one (each existed before its own listing, and none of them is ever deleted), so they are at most
`cap`. Rank only ever decides to leave, never to stay, so ties and clocks that disagree cost at worst a
refusal, never an agent over the cap. Worst case: creates racing for the last places may all be refused
(each saw the others before they left) and are retried by their callers; an over-cap workspace exists for
the moments its take-back needs (a delete that must wait for a build Coder does not let users cancel: up to
`FLEET_MCP_DELETE_WAIT_S`); a failed take-back is answered `unavailable` naming the agent to delete.

Workspaces being deleted do not count: their delete build is pending or running, and Coder drops them from
listings once it is done (a delete that fails counts again).

The check before a create is only there to refuse cheaply (nothing built) a fleet that is clearly full, so
it may read a count this server already holds (`Headcount`): the last one it asked of Coder, at most
`HELD_S` old, moved by the creates and deletes this server made since. A warm create is then the POST and
the confirming count: two requests. The held count is used only while it leaves two places free (this
create's and one more); the last place is always counted afresh, and so is a refusal. What the held count
cannot know (another replica's creates since) costs at worst a build that the confirmation takes back:
never an agent over the cap, since the confirmation alone decides who stays.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

from ..coder import errors as ce
from ..coder.client import CoderClient
from ..coder.schemas import Workspace
from ..errors import FleetError, conflict, unavailable
from ..settings import Settings
from .builds import Builds
from .polling import poll_until
from .rules import FLEET_QUERY

__all__ = ["HELD_S", "Cap", "Headcount", "Tally", "counts"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNDONE = ("failed", "canceling", "canceled")  # a delete build that will not remove the workspace
# How long a count asked of Coder stands in for the check before a create: short, since another replica's
# creates since then are not in it (what that costs is a build taken back, never an agent over the cap).
HELD_S = 30.0


def counts(ws: Workspace) -> bool:
    """Whether a fleet workspace counts against the cap: every one but those whose delete is under way."""
    build = ws.latest_build
    return not (build.transition == "delete" and build.job.status not in _UNDONE)


@dataclass(frozen=True)
class Tally:
    """The fleet as the cap sees it: agents that count, and those being deleted (which do not)."""

    agents: int
    leaving: int = 0


class Headcount:
    """The fleet's size as this server last counted it, moved by its own creates and deletes since.

    A count asked of Coder at loop time `at` stands for `HELD_S`. A create answered after `at` adds one (a
    count asked before the answer may or may not hold it: counted twice rather than missed), a delete sent
    after `at` takes one away (a count asked after it was sent may still hold it: again counted, not
    missed). So it errs high, where the price is one more request, not low.
    """

    def __init__(self) -> None:
        self._seen: tuple[float, int] | None = None  # (loop time the count was asked, agents counted)
        self._moves: list[tuple[float, int]] = []  # (loop time, +1 for a create answered, -1 a delete sent)

    def saw(self, at: float, agents: int) -> None:
        """Coder counted `agents` on a request sent at loop time `at`."""
        if self._seen is None or at >= self._seen[0]:
            self._seen = (at, agents)
            self._moves = [m for m in self._moves if m[0] > at]

    def moved(self, at: float, by: int) -> None:
        """This server changed the fleet by `by` at loop time `at`."""
        self._moves = [m for m in self._moves if m[0] > at - HELD_S] + [(at, by)]

    def now(self, at: float) -> int | None:
        """The fleet's size at loop time `at`, if a count young enough is held."""
        if self._seen is None or at - self._seen[0] >= HELD_S:
            return None
        since, agents = self._seen
        return agents + sum(by for t, by in self._moves if t > since)


class Cap:
    """Refuses a create over the cap, and takes back a create that a concurrent one pushed over it."""

    def __init__(self, client: CoderClient, builds: Builds, settings: Settings) -> None:
        self.client = client
        self.builds = builds
        self.settings = settings
        self.headcount = Headcount()

    async def tally(self, *, deadline: float | None) -> Tally:
        """The fleet's size before a create: the held count while it leaves two places free, else one small
        listing, and the whole fleet only when it is at the cap."""
        cap = self.settings.max_agents
        if not cap:
            return Tally(0)
        loop = asyncio.get_running_loop()
        held = self.headcount.now(loop.time())
        if held is not None and held + 2 <= cap:
            return Tally(held)
        asked = loop.time()
        total = (await self.client.workspaces(FLEET_QUERY, limit=1, deadline=deadline)).count
        if total < cap:
            self.headcount.saw(asked, total)  # those being deleted included: it errs high
            return Tally(total)
        asked = loop.time()
        listed = (await self.client.workspaces(FLEET_QUERY, deadline=deadline)).workspaces
        agents = sum(counts(w) for w in listed)
        self.headcount.saw(asked, agents)
        return Tally(agents, len(listed) - agents)

    def deleting(self, sent_at: float) -> None:
        """This server started deleting an agent (its delete build was requested at loop time `sent_at`)."""
        self.headcount.moved(sent_at, -1)

    def check(self, tally: Tally) -> None:
        """`conflict` when the fleet has no room for one more agent."""
        cap = self.settings.max_agents
        if not cap or tally.agents < cap:
            return
        leaving = f", not counting {tally.leaving} being deleted" if tally.leaving else ""
        details = {"agents": tally.agents, "max_agents": cap} | ({"being_deleted": tally.leaving} if tally.leaving
                                                                  else {})
        agents = "1 agent" if tally.agents == 1 else f"{tally.agents} agents"
        raise conflict(f"The fleet has {agents}, its cap (FLEET_MCP_MAX_AGENTS={cap}){leaving}. Delete "
                       "agents that are done (list_agents shows each one's last_activity_at; stopped ones cost "
                       "nothing running but still count), then create again.", **details)

    async def confirm(self, ws: Workspace, *, deadline: float | None) -> None:
        """After creating `ws`: return when it is within the cap; else take it back and answer `conflict`."""
        cap = self.settings.max_agents
        if not cap:
            return
        loop = asyncio.get_running_loop()
        self.headcount.moved(loop.time(), +1)
        seen: list[int] = []

        async def verdict(by: float) -> bool | None:
            try:
                asked = loop.time()
                if (total := (await self.client.workspaces(FLEET_QUERY, limit=1, deadline=by)).count) <= cap:
                    self.headcount.saw(asked, total)
                    return True
                asked = loop.time()
                live = [w for w in (await self.client.workspaces(FLEET_QUERY, deadline=by)).workspaces if counts(w)]
            except ce.CoderError:
                return None  # unknown yet: asked again until the wait ends, then taken back
            self.headcount.saw(asked, len(live))
            seen[:] = [len(live)]
            if len(live) <= cap:
                return True
            ranked = sorted(live, key=lambda w: (w.created_at or _EPOCH, w.id))
            place = next((i for i, w in enumerate(ranked) if w.id == ws.id), len(ranked))
            return False if place >= cap else None

        wait = self.settings.create_adopt_wait_s
        if await poll_until(verdict, timeout_s=wait, interval_s=self.settings.poll_interval_s, deadline=deadline):
            return
        await self._take_back(ws, seen[0] if seen else None, deadline)

    async def _take_back(self, ws: Workspace, agents: int | None, deadline: float | None) -> None:
        cap = self.settings.max_agents
        try:
            current = await self.client.workspace(ws.id, deadline=deadline)
            sent = asyncio.get_running_loop().time()
            if await self.builds.transition(current, "delete", deadline=deadline):
                self.deleting(sent)
        except ce.Gone:
            pass
        except (ce.CoderError, FleetError):
            raise unavailable(f"Agent {ws.name!r} was created over the fleet's cap (FLEET_MCP_MAX_AGENTS={cap}) "
                              "by creates racing for the last places, and taking it back failed: delete it "
                              "with delete_agent.", name=ws.name, max_agents=cap) from None
        raise conflict(f"The fleet reached its cap (FLEET_MCP_MAX_AGENTS={cap}) while agent {ws.name!r} was being "
                       "created (other creates took the last places): its workspace is being deleted again and "
                       "no agent was added. Delete agents that are done, then create again (the name is free "
                       "once the delete finishes).", name=ws.name, max_agents=cap,
                       **({"agents": agents} if agents is not None else {}))
