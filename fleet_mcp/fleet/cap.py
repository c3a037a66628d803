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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .builds import Builds
from ..coder import errors as ce
from ..coder.client import CoderClient
from ..coder.schemas import Workspace
from ..errors import FleetError, conflict, unavailable
from .polling import poll_until
from ..rules import FLEET_QUERY
from ..settings import Settings

__all__ = ["Cap", "Tally", "counts"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNDONE = ("failed", "canceling", "canceled")  # a delete build that will not remove the workspace


def counts(ws: Workspace) -> bool:
    """Whether a fleet workspace counts against the cap: every one but those whose delete is under way."""
    build = ws.latest_build
    return not (build.transition == "delete" and build.job.status not in _UNDONE)


@dataclass(frozen=True)
class Tally:
    """The fleet as the cap sees it: agents that count, and those being deleted (which do not)."""

    agents: int
    leaving: int = 0


class Cap:
    """Refuses a create over the cap, and takes back a create that a concurrent one pushed over it."""

    def __init__(self, client: CoderClient, builds: Builds, settings: Settings) -> None:
        self.client = client
        self.builds = builds
        self.settings = settings

    async def tally(self) -> Tally:
        """The fleet's size before a create: one small listing, the whole fleet only when it is at the cap."""
        cap = self.settings.max_agents
        if not cap:
            return Tally(0)
        total = (await self.client.workspaces(FLEET_QUERY, limit=1)).count
        if total < cap:
            return Tally(total)
        listed = (await self.client.workspaces(FLEET_QUERY)).workspaces
        agents = sum(counts(w) for w in listed)
        return Tally(agents, len(listed) - agents)

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

    async def confirm(self, ws: Workspace) -> None:
        """After creating `ws`: return when it is within the cap; else take it back and answer `conflict`."""
        cap = self.settings.max_agents
        if not cap:
            return
        seen: list[int] = []

        async def verdict() -> bool | None:
            try:
                if (await self.client.workspaces(FLEET_QUERY, limit=1)).count <= cap:
                    return True
                live = [w for w in (await self.client.workspaces(FLEET_QUERY)).workspaces if counts(w)]
            except ce.CoderError:
                return None  # unknown yet: asked again until the wait ends, then taken back
            seen[:] = [len(live)]
            if len(live) <= cap:
                return True
            ranked = sorted(live, key=lambda w: (w.created_at or _EPOCH, w.id))
            place = next((i for i, w in enumerate(ranked) if w.id == ws.id), len(ranked))
            return False if place >= cap else None

        wait = self.settings.create_adopt_wait_s
        if await poll_until(verdict, timeout_s=wait, interval_s=self.settings.poll_interval_s):
            return
        await self._take_back(ws, seen[0] if seen else None)

    async def _take_back(self, ws: Workspace, agents: int | None) -> None:
        cap = self.settings.max_agents
        try:
            await self.builds.transition(await self.client.workspace(ws.id), "delete")
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
