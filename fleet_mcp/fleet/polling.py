"""Bounded waits: `poll_until`, the fleet's one wait loop, and `within`, the deadline of a whole call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TypeVar

from ..errors import unavailable

__all__ = ["DEADLINE", "current_deadline", "last_probe_s", "poll_until", "until", "within"]

T = TypeVar("T")

# When the tool call being served must be over (loop time); the Coder client asks `current_deadline` and
# retries never run past it.
DEADLINE: ContextVar[float | None] = ContextVar("fleet_mcp_deadline", default=None)


def current_deadline() -> float | None:
    """The deadline of the tool call being served (loop time), if any."""
    return DEADLINE.get()


HURRIED_INTERVAL_S = 0.1
LAST_PROBE_S = 1.0  # the most the last probe, the one at the deadline, is given


def last_probe_s(interval_s: float) -> float:
    """How long past its `timeout_s` a wait polling every `interval_s` may run: its last probe's time."""
    return min(interval_s, LAST_PROBE_S)


async def poll_until(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float, interval_s: float,
                     hurry: asyncio.Event | None = None) -> T | None:
    """Call `probe` until it answers something other than None; None once `timeout_s` has passed.

    The first probe runs at once; no sleep reaches past the deadline, and one last probe runs at it. Each
    probe, its requests and their retries get at most the time left (the last one `last_probe_s`): one cut
    there counts as None, so the whole wait is over within `timeout_s + last_probe_s(interval_s)` whatever
    the requests inside do. Once `hurry` is set (the server is stopping) the pause between probes shrinks
    to a tenth of a second.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    end = deadline + last_probe_s(interval_s)
    while True:
        result = await _bounded(probe, end)
        if result is not None:
            return result
        left = deadline - loop.time()
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


async def _bounded(probe: Callable[[], Awaitable[T | None]], end: float) -> T | None:
    """One probe, over by loop time `end`; None if it was cut there."""
    try:
        async with until(end) as scope:
            return await probe()
    except TimeoutError:
        if scope.expired():
            return None
        raise


@asynccontextmanager
async def until(end: float) -> AsyncIterator[asyncio.Timeout]:
    """Inside, requests and their retries are over by loop time `end`: TimeoutError when the block is cut there."""
    outer = DEADLINE.get()
    token = DEADLINE.set(end if outer is None else min(outer, end))
    try:
        async with asyncio.timeout_at(end) as scope:
            yield scope
    finally:
        DEADLINE.reset(token)


@asynccontextmanager
async def within(seconds: float, what: str) -> AsyncIterator[None]:
    """The block must be over in `seconds`, retries and inner waits included; `unavailable` when it is not.

    Requests sent inside stop retrying at the deadline (`DEADLINE`), so the block ends on time with the
    last real error rather than being cut in the middle of a backoff.
    """
    loop = asyncio.get_running_loop()
    token = DEADLINE.set(loop.time() + seconds)
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise unavailable(f"{what} did not finish within {seconds:.0f} s: Coder or the agent is slow or "
                          "unreachable. Check with show_agent before repeating a change.",
                          deadline_s=round(seconds, 1)) from None
    finally:
        DEADLINE.reset(token)
