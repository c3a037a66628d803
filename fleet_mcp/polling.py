"""Bounded waits: `poll_until`, the fleet's one wait loop, and `within`, the deadline of a whole call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TypeVar

from .errors import unavailable

__all__ = ["DEADLINE", "current_deadline", "poll_until", "within"]

T = TypeVar("T")

# When the tool call being served must be over (loop time); the Coder client asks `current_deadline` and
# retries never run past it.
DEADLINE: ContextVar[float | None] = ContextVar("fleet_mcp_deadline", default=None)


def current_deadline() -> float | None:
    """The deadline of the tool call being served (loop time), if any."""
    return DEADLINE.get()


HURRIED_INTERVAL_S = 0.1


async def poll_until(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float, interval_s: float,
                     hurry: asyncio.Event | None = None) -> T | None:
    """Call `probe` until it answers something other than None; None once `timeout_s` has passed.

    The first probe runs at once; no sleep reaches past the deadline, and one last probe runs at it. Once
    `hurry` is set (the server is stopping) the pause between probes shrinks to a tenth of a second.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = await probe()
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
