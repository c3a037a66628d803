"""Each tool's overall deadline: its requests, their retries and its inner waits, all included.

A tool answers within its deadline, whatever Coder does (gone, stalling, failing): reads retry within what
is left of it, and a tool that runs out answers `unavailable` saying so. `specs/tools.md` lists them. A wait
inside a call narrows the call's deadline to its own end with `sooner`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .settings import Settings

__all__ = ["Deadline", "build", "cancel", "create", "deadline_of_a_read", "longest_call", "send", "sooner", "wait"]

Deadline = Callable[[Settings, dict[str, Any]], float]
MARGIN_S = 5.0


def sooner(deadline: float | None, end: float) -> float:
    """The earlier of a call's `deadline` (None: none) and `end`, both loop times."""
    return end if deadline is None else min(deadline, end)


def deadline_of_a_read(s: Settings, _: dict[str, Any]) -> float:
    """Reads: one request's time and the retry budget (concurrent requests share both)."""
    return s.request_timeout_s + s.retry_budget_s + MARGIN_S


def create(s: Settings, _: dict[str, Any]) -> float:
    """The reads before it, the create itself, the look for its workspace after an ambiguous failure, and the
    cap's confirmation with its take-back (fleet_mcp/fleet/cap.py)."""
    return 2 * s.request_timeout_s + s.retry_budget_s + 2 * s.create_adopt_wait_s + s.delete_wait_s + MARGIN_S


def build(s: Settings, _: dict[str, Any]) -> float:
    """Stop, start and delete: the lookup, the wait for a build it cannot cancel, and the build request."""
    return 2 * s.request_timeout_s + s.delete_wait_s + MARGIN_S


def send(s: Settings, _: dict[str, Any]) -> float:
    """A task or an answer: the lookup, the agent's state, the send (and, to interrupt first, the settling)."""
    return 2 * s.request_timeout_s + s.retry_budget_s + s.cancel_wait_s + MARGIN_S


def cancel(s: Settings, _: dict[str, Any]) -> float:
    """The lookup, the interrupt, and the wait for the agent to stop."""
    return 2 * s.request_timeout_s + s.cancel_wait_s + MARGIN_S


def wait(s: Settings, arguments: dict[str, Any]) -> float:
    """The caller's own timeout, and one last listing."""
    timeout = arguments.get("timeout_s")
    return (float(timeout) if isinstance(timeout, int | float) else 120.0) + s.request_timeout_s + MARGIN_S


def longest_call(s: Settings) -> float:
    """The longest deadline of a call that a stop does not cut short (a wait answers at once when the server
    stops): how long a stdio server whose client closed stdin lets the calls in flight finish."""
    return max(deadline(s, {}) for deadline in (deadline_of_a_read, create, build, send, cancel))
