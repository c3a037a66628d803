"""The emulator's clock: virtual (tests advance it) or real, with a timer queue.

Every state change of the emulator that happens "later" (a build finishing, an
agent connecting, Claude Code reporting) is a timer on this clock. Nothing runs
in the background: due timers fire when the backend settles, which it does on
every request and whenever the clock is advanced. A virtual clock therefore
makes every test deterministic, and a real clock only needs a request (or the
server's ticker) to move the world along.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["Clock"]

EPOCH = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


class Clock:
    """Wall time for the emulator plus a queue of timers due at given times."""

    def __init__(self, *, virtual: bool = True, start: datetime = EPOCH) -> None:
        self.virtual = virtual
        self._start = start if virtual else datetime.now(UTC)
        self._origin = time.monotonic()
        self._offset = 0.0
        self._frozen: float | None = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def elapsed(self) -> float:
        """Seconds since the clock started, as the emulator sees them."""
        if self._frozen is not None:
            return self._frozen
        if self.virtual:
            return self._offset
        return time.monotonic() - self._origin + self._offset

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self.elapsed())

    def at(self, elapsed: float) -> datetime:
        return self._start + timedelta(seconds=elapsed)

    def backdate(self, seconds: float) -> None:
        """Start the clock `seconds` earlier: what a seed builds then settles, ending at the time it started
        (on real time: wall time, not `seconds` ahead of it)."""
        self._start -= timedelta(seconds=seconds)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.elapsed() + max(delay, 0.0), next(self._seq), fn))

    def advance(self, seconds: float) -> None:
        """Move time forward, firing each timer at its own due time, in order."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        target = self.elapsed() + seconds
        self.run_due(until=target)
        self._offset += target - self.elapsed()

    def run_due(self, until: float | None = None) -> int:
        """Fire every timer due by ``until`` (default: now); returns how many fired.

        While a timer runs, the clock reads as that timer's due time, so what it
        records and what it schedules next are exact whatever the lateness.
        """
        target = self.elapsed() if until is None else until
        fired = 0
        while self._timers and self._timers[0][0] <= target:
            due, _, fn = heapq.heappop(self._timers)
            self._frozen = due
            try:
                fn()
            finally:
                self._frozen = None
            fired += 1
        return fired

    def clear(self) -> None:
        self._timers.clear()
