"""The one timestamp serializer: ISO 8601 in UTC with `Z`, for every time the server, the runner and their logs
write (what Coder and AgentAPI send is parsed in `coder/lenient.py`; the emulator writes Coder's own forms).

Tool answers say seconds (`2026-11-24T12:00:00Z`); the runner's wire, the audit log and MCP Tasks say
milliseconds (`2026-11-24T12:00:00.123Z`). Standard library only: the runner imports it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, overload

__all__ = ["Precision", "iso", "now_iso"]

Precision = Literal["seconds", "milliseconds"]


@overload
def iso(dt: datetime, timespec: Precision = "seconds") -> str: ...
@overload
def iso(dt: datetime | None, timespec: Precision = "seconds") -> str | None: ...
def iso(dt: datetime | None, timespec: Precision = "seconds") -> str | None:
    """`dt` in UTC with `Z`, whatever offset it carries, cut to `timespec`; a time past what UTC holds, its
    last second (or first); None for None."""
    if dt is None:
        return None
    try:
        utc = dt.astimezone(UTC)
    except OverflowError:  # an agent's own time, late on 9999-12-31 west of UTC or early on 0001-01-01 east
        utc = (datetime.max if dt.year > 1 else datetime.min).replace(microsecond=0, tzinfo=UTC)
    return utc.isoformat(timespec=timespec)[:-6] + "Z"  # "+00:00" off: a list of 1,000 agents writes 2,000


def now_iso(timespec: Precision = "seconds") -> str:
    """Now, as `iso` writes it."""
    return iso(datetime.now(UTC), timespec)
