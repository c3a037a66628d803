"""What a runner agent's prompt asks, in lists and waits: read from the runner, never from Coder's listing.

A list sees that a runner agent waits on a prompt by the `fleet-runner:` mark of its app status, which the
runner posts; but the agent can post app statuses too (its workspace's agent token). So the mark only says
where to look: the prompt shown, its whole input and digest, and whether one waits at all, come from the
runner's own state, asked for the agents the mark names (specs/runner.md, threat model).

Likewise a runner agent a wait would answer idle: Coder's CLI queues each status and delivers it later
(cli/exp_mcp.go), so on a slow machine Coder still shows the agent ready after its runner took a task. Its
runner, which took the task synchronously, says whether it really is (`read_idle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .status import Snapshot, Status, live_status

if TYPE_CHECKING:
    from .agents import Fleet

__all__ = ["CONFIRMED_MAX", "confirmed", "confirmed_all", "marked", "read_idle"]

CONFIRMED_MAX = 50  # runners asked per list or poll; beyond, a marked prompt is shown without its input
Which = Callable[[Snapshot, Status], bool]


def marked(snap: Snapshot, status: Status) -> bool:
    """A runner agent whose needs_input was read from its app status (the mark), not from the runner."""
    return status.value == "needs_input" and status.source == "app status" and snap.kind == "runner"


def read_idle(snap: Snapshot, status: Status) -> bool:
    """A runner agent read idle from its app statuses, which may not yet hold the task its runner took."""
    return status.value == "idle" and status.source == "app status" and snap.kind == "runner"


async def confirmed(fleet: Fleet, snap: Snapshot, status: Status, *, deadline: float | None,
                    which: Which = marked) -> Status:
    """`status` of `snap` from a listing; for a runner agent `which` picks (by default one marked needs_input),
    its status as its runner says it (the prompt whole, or busy or idle when none waits). Unreachable: the
    listing's status, a prompt's input unknown (None)."""
    if not which(snap, status):
        return status
    try:
        driver = await fleet.keyed_driver(snap, deadline=deadline)
        live, unreachable = await fleet.live(driver, deadline=deadline)
    except Exception:  # noqa: BLE001 - whatever its runner answered is this agent's, never the list's
        return status
    if live is None:
        return status
    return live_status(replace(snap, live=live, unreachable=unreachable))


async def confirmed_all(fleet: Fleet, found: Sequence[tuple[Snapshot, Status]], *, deadline: float | None,
                        which: Which = marked) -> list[Status]:
    """`confirmed` for each (snapshot, status), side by side, at most CONFIRMED_MAX runners asked."""
    picked = [i for i, (snap, status) in enumerate(found) if which(snap, status)][:CONFIRMED_MAX]
    statuses = [status for _, status in found]
    for i, status in zip(picked, await asyncio.gather(
            *(confirmed(fleet, found[i][0], found[i][1], deadline=deadline, which=which) for i in picked)),
            strict=True):
        statuses[i] = status
    return statuses
