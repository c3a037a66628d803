"""Bounded waits: `poll_until`, the fleet's one wait loop, and `within`, the deadline of a whole call.

A deadline is a loop time (`asyncio.get_running_loop().time()`) by which a call must be over, or None for
none. It is passed explicitly, as a plain `deadline: float | None` keyword, from where it is known (the
tool's wrapper, `within`) down every fleet and driver method that makes requests, to the Coder client's
request methods, whose retries never run past it. A wait narrows it for what it does inside
(`deadlines.sooner`): each probe of `poll_until` receives the deadline it must be over by. A plain value
rather than a context variable: what bounds a request can be read at its call site, and a read begun early
(prefetched, shared by several callers) carries the deadline of the call that began it, not whatever is current
when it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from ..deadlines import sooner
from ..errors import unavailable

__all__ = ["last_probe_s", "poll_until", "within"]

T = TypeVar("T")

HURRIED_INTERVAL_S = 0.1
LAST_PROBE_S = 1.0  # the most the last probe, the one at the deadline, is given


def last_probe_s(interval_s: float) -> float:
    """How long past its `timeout_s` a wait polling every `interval_s` may run: its last probe's time."""
    return min(interval_s, LAST_PROBE_S)


async def poll_until(probe: Callable[[float], Awaitable[T | None]], *, timeout_s: float, interval_s: float,
                     deadline: float | None, hurry: asyncio.Event | None = None) -> T | None:
    """Call `probe` until it answers something other than None; None once `timeout_s` has passed.

    The first probe runs at once; no sleep reaches past the wait's end, and one last probe runs at it. Each
    probe is given the deadline its requests and their retries must keep (the wait's end plus the last
    probe's time, or the call's `deadline` if sooner), and is cut there: one cut counts as None, so the
    whole wait is over within `timeout_s + last_probe_s(interval_s)` whatever the requests inside do. Once
    `hurry` is set (the server is stopping) the pause between probes shrinks to a tenth of a second.
    """
    loop = asyncio.get_running_loop()
    end_of_wait = loop.time() + timeout_s
    end = end_of_wait + last_probe_s(interval_s)
    while True:
        result = await _bounded(probe, end, sooner(deadline, end))
        if result is not None:
            return result
        left = end_of_wait - loop.time()
        if left <= 0:
            return None
        pause = min(interval_s, left)
        if hurry is None:
            await asyncio.sleep(pause)
        elif hurry.is_set():
            await asyncio.sleep(min(pause, HURRIED_INTERVAL_S))
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hurry.wait(), pause)


async def _bounded(probe: Callable[[float], Awaitable[T | None]], end: float, deadline: float) -> T | None:
    """One probe, over by loop time `end`; None if it was cut there."""
    try:
        async with asyncio.timeout_at(end) as scope:
            return await probe(deadline)
    except TimeoutError:
        if scope.expired():
            return None
        raise


@asynccontextmanager
async def within(seconds: float, what: str) -> AsyncIterator[float]:
    """The block must be over in `seconds`, retries and inner waits included; `unavailable` when it is not.

    Yields the deadline (loop time) to pass to the requests sent inside: they stop retrying there, so the
    block ends on time with the last real error rather than being cut in the middle of a backoff.
    """
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        async with asyncio.timeout_at(deadline):
            yield deadline
    except TimeoutError:
        raise unavailable(f"{what} did not finish within {seconds:.0f} s: Coder or the agent is slow or "
                          "unreachable. Check with show_agent before repeating a change.",
                          deadline_s=round(seconds, 1)) from None
