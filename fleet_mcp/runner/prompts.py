"""The permission prompts of a runner's conversation: the one tool call waiting for the fleet's allow or deny,
and what became of the prompts answered lately, so that an answer never lands on a prompt its sender did not see.

A prompt is shown whole: the tool's input as Claude Code gave it (a Write's content, an Edit's strings, a Bash
command with its flags), cut only past INPUT_MAX characters of JSON, and named by a digest of the tool and its
whole input, which an answer must carry back: an answer lands only on the prompt its sender was shown.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import runner_wire as wire
from ..runner_wire import ANSWERED_KEPT, INPUT_MAX
from .store import now_iso

__all__ = ["Conflict", "InputCut", "Pending", "PromptChanged", "Prompts", "StalePrompt", "digest_of", "shown_input"]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def digest_of(tool: str, tool_input: dict[str, Any]) -> str:
    """SHA-256 (hex) of the tool and its whole input: what an answer names as the prompt it was shown."""
    return hashlib.sha256(_json({"tool": tool, "input": tool_input}).encode("utf-8", "surrogatepass")).hexdigest()


def _cut(value: Any, most: int) -> Any:
    if isinstance(value, str):
        return value[:most]
    if isinstance(value, dict):
        return {k: _cut(v, most) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, most) for v in value]
    return value


def shown_input(tool_input: dict[str, Any]) -> tuple[dict[str, Any], bool, int]:
    """(the input as shown, whether it was cut, its whole length as JSON text). Within INPUT_MAX it is whole;
    past it every string is cut to the longest length that fits (keys, numbers and flags stay as they are)."""
    whole = len(_json(tool_input))
    if whole <= INPUT_MAX:
        return tool_input, False, whole
    low, high = 0, INPUT_MAX if len(_json(_cut(tool_input, 0))) <= INPUT_MAX else 0
    while low < high:  # the longest cut of every string that fits
        mid = (low + high + 1) // 2
        low, high = (mid, high) if len(_json(_cut(tool_input, mid))) <= INPUT_MAX else (low, mid - 1)
    shown = _cut(tool_input, low)
    if len(_json(shown)) > INPUT_MAX:  # its keys and items alone are too many: its JSON text, cut
        shown = {"input_json": _json(tool_input)[:INPUT_MAX]}
    return shown, True, whole


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
    summary: str  # one line, for a glance: never what an answer approves
    since: str
    answer: asyncio.Future[Any] = field(repr=False)
    input: dict[str, Any] = field(default_factory=dict, repr=False)  # as shown: whole within INPUT_MAX
    truncated: bool = False
    input_chars: int = 0
    digest: str = ""

    def shown(self) -> wire.Pending:
        """As `/state` and a refused answer show it: whole."""
        return wire.Pending(id=self.id, tool=self.tool, summary=self.summary, input=self.input,
                            input_truncated=self.truncated, input_chars=self.input_chars, digest=self.digest,
                            since=self.since)


class StalePrompt(Conflict):
    """An answer named a prompt that no longer waits; `pending` is what waits now (or None)."""

    def __init__(self, prompt_id: str, pending: Pending | None, answered: wire.Answered | None) -> None:
        now = f"prompt {pending.id} ({pending.tool}) waits now" if pending else "no prompt waits now"
        said = f"it was answered {answered.decision} at {answered.at}" if answered else "it is not pending"
        super().__init__("stale_prompt", f"prompt {prompt_id}: {said}; {now}")
        self.pending, self.answered = pending, answered


class PromptChanged(Conflict):
    """An answer named the waiting prompt by its id with another digest: its sender was shown something else
    (an app status the agent posted, say). `pending` is the prompt that waits, whole."""

    def __init__(self, pending: Pending) -> None:
        super().__init__("prompt_changed", f"prompt {pending.id} waits, but not as the answer's sender was shown "
                         f"it: its digest is {pending.digest}. Read it again (its tool and whole input are here) "
                         "and answer with that digest")
        self.pending, self.answered = pending, None


class InputCut(Conflict):
    """An allow of a prompt whose input was cut, without saying so (`allow_truncated`)."""

    def __init__(self, pending: Pending) -> None:
        super().__init__("input_truncated", f"prompt {pending.id}'s input is {pending.input_chars} characters, "
                         f"shown cut to {INPUT_MAX}: allowing what was not shown whole needs allow_truncated")
        self.pending, self.answered = pending, None


class Prompts:
    """The prompt waiting now (`pending`) and the answers given lately (`answered`, newest last)."""

    def __init__(self) -> None:
        self.pending: Pending | None = None
        self.answered: list[wire.Answered] = []

    def ask(self, tool: str, tool_input: dict[str, Any], summary: str) -> Pending:
        """A new prompt for `tool` with `tool_input` (`summary`: its one line), waiting from now on."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        shown, truncated, chars = shown_input(tool_input)
        # The runner's own id, not the API's tool_use_id: unique whatever the model's stream says.
        self.pending = Pending(f"p-{uuid.uuid4().hex[:16]}", tool, summary, now_iso(), answer, shown, truncated,
                               chars, digest_of(tool, tool_input))
        return self.pending

    async def wait(self, pending: Pending, timeout: float) -> tuple[bool, str]:
        """The answer to `pending` (allow, message), a denial once `timeout` seconds pass unanswered."""
        try:
            allow, message = await asyncio.wait_for(asyncio.shield(pending.answer), timeout)
        except TimeoutError:
            allow, message = False, f"No answer within {timeout:g} s, so the fleet denied this."
            self.note(pending, "deny", "timeout")
        finally:
            if self.pending is pending:
                self.pending = None
        return allow, message

    def answer(self, allow: bool, message: str, prompt_id: str, digest: str, allow_truncated: bool = False) -> Pending:
        """Allows or denies the waiting prompt, only if it is `prompt_id` with `digest` (what its sender was
        shown); an allow of a cut input only with `allow_truncated`. The prompt answered; StalePrompt when
        another waits or none, PromptChanged for another digest, InputCut for a cut input."""
        pending = self.pending if self.pending is not None and not self.pending.answer.done() else None
        if pending is None or pending.id != prompt_id:
            raise StalePrompt(prompt_id, pending, self.answer_of(prompt_id))
        if digest != pending.digest:
            raise PromptChanged(pending)
        if allow and pending.truncated and not allow_truncated:
            raise InputCut(pending)
        pending.answer.set_result((allow, message))
        self.note(pending, "allow" if allow else "deny", "fleet")
        self.pending = None
        return pending

    def deny(self, message: str, by: str) -> None:
        """Denies the waiting prompt, if any, with `message` for Claude; `by` says why in `answered`."""
        if self.pending and not self.pending.answer.done():
            self.pending.answer.set_result((False, message))
            self.note(self.pending, "deny", by)

    def drop(self) -> None:
        """The turn ended: nothing waits any more."""
        self.deny("The turn ended.", "turn_ended")
        self.pending = None

    def answer_of(self, prompt_id: str) -> wire.Answered | None:
        """How prompt `prompt_id` was answered, if it was lately."""
        return next((a for a in reversed(self.answered) if a.id == prompt_id), None)

    def note(self, pending: Pending, decision: str, by: str) -> None:
        self.answered.append(wire.Answered(id=pending.id, decision=decision, by=by, at=now_iso(), tool=pending.tool,
                                           digest=pending.digest))
        del self.answered[:-ANSWERED_KEPT]
