"""`poll_until`: the one bounded wait loop of the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["poll_until"]

T = TypeVar("T")


async def poll_until(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float, interval_s: float) -> T | None:
    """Call `probe` until it answers something other than None; None once `timeout_s` has passed.

    The first probe runs at once; no sleep reaches past the deadline, and one last probe runs at it.
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
        await asyncio.sleep(min(interval_s, left))
