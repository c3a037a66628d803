"""The permission prompts of a runner's conversation: the one tool call waiting for the fleet's allow or deny,
and what became of the prompts answered lately, so that an answer never lands on a prompt its sender did not see.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import runner_wire as wire
from ..runner_wire import ANSWERED_KEPT
from .store import now_iso

__all__ = ["Conflict", "Pending", "Prompts", "StalePrompt"]


class Conflict(Exception):
    """A request the conversation's state does not allow (HTTP 409 with this code)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Pending:
    """A tool call waiting for the fleet's allow or deny."""

    id: str
    tool: str
    summary: str
    since: str
    answer: asyncio.Future[Any] = field(repr=False)

    def shown(self) -> wire.Pending:
        """As `/state` and a stale answer's refusal show it."""
        return wire.Pending(id=self.id, tool=self.tool, summary=self.summary, since=self.since)


class StalePrompt(Conflict):
    """An answer named a prompt that no longer waits; `pending` is what waits now (or None)."""

    def __init__(self, prompt_id: str, pending: Pending | None, answered: wire.Answered | None) -> None:
        now = f"prompt {pending.id} ({pending.tool}) waits now" if pending else "no prompt waits now"
        said = f"it was answered {answered.decision} at {answered.at}" if answered else "it is not pending"
        super().__init__("stale_prompt", f"prompt {prompt_id}: {said}; {now}")
        self.pending, self.answered = pending, answered


class Prompts:
    """The prompt waiting now (`pending`) and the answers given lately (`answered`, newest last)."""

    def __init__(self) -> None:
        self.pending: Pending | None = None
        self.answered: list[wire.Answered] = []

    def ask(self, tool: str, summary: str) -> Pending:
        """A new prompt for `tool`, waiting from now on."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # The runner's own id, not the API's tool_use_id: unique whatever the model's stream says.
        self.pending = Pending(f"p-{uuid.uuid4().hex[:16]}", tool, summary, now_iso(), answer)
        return self.pending

    async def wait(self, pending: Pending, timeout: float) -> tuple[bool, str]:
        """The answer to `pending` (allow, message), a denial once `timeout` seconds pass unanswered."""
        try:
            allow, message = await asyncio.wait_for(asyncio.shield(pending.answer), timeout)
        except TimeoutError:
            allow, message = False, f"No answer within {timeout:g} s, so the fleet denied this."
            self.note(pending.id, "deny", "timeout")
        finally:
            if self.pending is pending:
                self.pending = None
        return allow, message

    def answer(self, allow: bool, message: str, prompt_id: str | None = None) -> None:
        """Allows or denies the waiting prompt, only if it is `prompt_id` (when given). Conflict when
        nothing waits, StalePrompt for another."""
        pending = self.pending if self.pending is not None and not self.pending.answer.done() else None
        if prompt_id is not None and (pending is None or pending.id != prompt_id):
            raise StalePrompt(prompt_id, pending, self.answer_of(prompt_id))
        if pending is None:
            raise Conflict("nothing_pending", "no permission is waiting for an answer")
        pending.answer.set_result((allow, message))
        self.note(pending.id, "allow" if allow else "deny", "fleet")
        self.pending = None

    def deny(self, message: str, by: str) -> None:
        """Denies the waiting prompt, if any, with `message` for Claude; `by` says why in `answered`."""
        if self.pending and not self.pending.answer.done():
            self.pending.answer.set_result((False, message))
            self.note(self.pending.id, "deny", by)

    def drop(self) -> None:
        """The turn ended: nothing waits any more."""
        self.deny("The turn ended.", "turn_ended")
        self.pending = None

    def answer_of(self, prompt_id: str) -> wire.Answered | None:
        """How prompt `prompt_id` was answered, if it was lately."""
        return next((a for a in reversed(self.answered) if a.id == prompt_id), None)

    def note(self, prompt_id: str, decision: str, by: str) -> None:
        self.answered.append(wire.Answered(id=prompt_id, decision=decision, by=by, at=now_iso()))
        del self.answered[:-ANSWERED_KEPT]
