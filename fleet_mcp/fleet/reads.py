"""Reads side by side: begun early, used only if still wanted, and never a lost exception; a read of one
agent among many whose failure is that agent's entry.

Shared by `agents` (one agent's snapshot), `lifecycle` (a create's cap count)
and `waits` (glances): a read begun before it is known to be needed saves a
round trip when it is, and is settled quietly when it is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any, TypeVar

from ..coder import errors as ce
from ..drivers import DriverError
from ..errors import FleetError, from_coder, unavailable

__all__ = ["nothing", "own_problem", "prefetch", "quietly", "settle"]

log = logging.getLogger("fleet_mcp")

K = TypeVar("K")
T = TypeVar("T")


def settle(future: asyncio.Future[Any]) -> None:
    """Cancel `future` if it is still running, else take its outcome: a read begun early and not needed in the
    end is never logged as a lost exception."""
    if not future.cancel() and not future.cancelled():
        future.exception()


async def quietly(call: Awaitable[T]) -> T | None:
    """A read whose failure only leaves a detail out of the answer."""
    try:
        return await call
    except (ce.AppProxyError, DriverError):
        return None


async def nothing() -> None:
    """A read that is not needed, where one is expected."""
    return None


@contextlib.contextmanager
def prefetch(reads: Mapping[K, Awaitable[T]]) -> Iterator[dict[K, asyncio.Future[T]]]:
    """Begin every read now; within, await those wanted; on leaving, settle the rest."""
    begun: dict[K, asyncio.Future[T]] = {key: asyncio.ensure_future(read) for key, read in reads.items()}
    try:
        yield begun
    finally:
        for future in begun.values():
            settle(future)


def own_problem(name: str, exc: Exception) -> FleetError:
    """What a failed read of agent `name`, one of many in a call, says in that agent's entry: whatever it sent
    (a time, number or text past what the fleet reads) costs its own entry, never the others' or the call."""
    if isinstance(exc, FleetError):
        return exc
    if isinstance(exc, ce.CoderError):
        return from_coder(exc)
    log.warning("agent %r could not be read: unexpected %s", name, type(exc).__name__)
    return unavailable(f"Agent {name!r} could not be read: it sent what the fleet cannot read "
                       f"({type(exc).__name__}). The other agents are answered; show_agent shows this one.",
                       agent_name=name)
