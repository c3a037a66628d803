"""Each user's share of Coder's rate limit: the server's Coder requests counted per user, a sliding minute.

Coder allows each user 512 API requests a minute (its `--api-rate-limit`
default) and answers 429 beyond. Background polling (wait_for_agents'
listings) must leave the rest of that minute to the user's other calls and
clients: a wait is admitted only while this user's count over the last minute
is under `FLEET_MCP_RATE_SHARE` of the limit, and a poll that would go over
it is put off until the minute allows it.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque

from ..errors import unavailable

__all__ = ["CODER_RATE_PER_MINUTE", "WINDOW_S", "Meter"]

CODER_RATE_PER_MINUTE = 512
WINDOW_S = 60.0


class Meter:
    """Counts one user's Coder requests over the last minute (the event loop's clock)."""

    def __init__(self, share: float, per_minute: int = CODER_RATE_PER_MINUTE) -> None:
        self.polling_quota = max(1, math.floor(share * per_minute))
        self._times: deque[float] = deque()
        self.total = 0

    def _now(self) -> float:
        now = asyncio.get_running_loop().time()
        while self._times and now - self._times[0] >= WINDOW_S:
            self._times.popleft()
        return now

    def note(self) -> None:
        """One Coder request was sent."""
        self._times.append(self._now())
        self.total += 1

    @property
    def last_minute(self) -> int:
        """How many requests were sent over the last minute."""
        self._now()
        return len(self._times)

    def free_in(self) -> float:
        """Seconds until a polling request fits in the quota (0 when it does now)."""
        now = self._now()
        over = len(self._times) - self.polling_quota
        if over < 0:
            return 0.0
        return max(0.0, self._times[over] + WINDOW_S - now)

    def admit(self, what: str) -> None:
        """Let a polling call start, or refuse it with `unavailable` and a retry hint."""
        if (wait := self.free_in()) > 0:
            raise unavailable(
                f"{what} would take this user's Coder requests over {self.polling_quota} in a minute (the share "
                f"of Coder's {CODER_RATE_PER_MINUTE}/minute rate limit left to waiting); retry in {math.ceil(wait)} s.",
                retry_after_s=math.ceil(wait))

    async def room(self) -> None:
        """Wait until a polling request fits in the quota."""
        while (wait := self.free_in()) > 0:
            await asyncio.sleep(wait)
