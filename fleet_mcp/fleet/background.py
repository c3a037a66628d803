"""Going on in the background: what a waiting verb hands over when its caller takes MCP Tasks.

`serving/tasks.py` sets `offered` around a `tools/call` from a client that declared the tasks extension.
A verb that would wait (`Waits.wait`, a task handed out with `Turns.start`) then looks once, and when it is
not over leaves a `Watch` here instead of holding the call: the call answers a task whose id carries the
watch, and each `tasks/get` looks once again (`Waits.look`). Nothing is kept in memory between looks.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from ..models import Condition

__all__ = ["TURN_S", "Handover", "Watch", "offered"]

TURN_S = 6 * 3600.0  # how long a handed-out task waits for its turn to end before answering where it stands


@dataclass(frozen=True)
class Watch:
    """What a background task waits on: `kind` wait (wait_for_agents' answer) or turn (a task handed out: the
    agent's turn over, answered as get_agent_result), its agents, condition, and when it started and ends
    (Unix times: they outlive this process)."""

    kind: Literal["wait", "turn"]
    names: tuple[str, ...]
    until: tuple[Condition, ...]
    mode: Literal["all", "any"]
    started: float
    ends: float
    said: str = ""  # the verb's own answer on handing over (start_agent_task's message)

    @classmethod
    def turn(cls, name: str, *, needs_input: bool, said: str) -> Watch:
        """A handed-out task's watch: `name`'s turn over (idle, stopped or failed; needs_input too when prompts
        go back to the model), within `TURN_S`."""
        until: tuple[Condition, ...] = ("idle", "stopped", "failed", *(("needs_input",) if needs_input else ()))
        now = time.time()
        return cls("turn", (name,), until, "all", now, now + TURN_S, said)


@dataclass
class Handover:
    """Where a verb leaves its `Watch` instead of waiting."""

    watch: Watch | None = field(default=None)


offered: ContextVar[Handover | None] = ContextVar("fleet_mcp_background", default=None)
