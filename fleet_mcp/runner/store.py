"""The runner's durable state: one JSON file, rewritten atomically (temp file + rename) after every change."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import times
from ..runner_wire import MESSAGES_KEPT, RESULTS_KEPT, Message, Result

__all__ = ["PREVIEW_CHARS", "Saved", "Store", "latest_output", "latest_task", "now_iso"]

log = logging.getLogger("fleet_mcp.runner")
VERSION = 1
SCALARS = ("session_id", "model", "spec_sent", "session_cost_usd", "cost_usd", "turns", "next_message_id")
PREVIEW_CHARS = 300  # of the newest output, in /state: what a fleet's glance shows, without the conversation


def now_iso() -> str:
    """Now, as the runner's wire says times: in milliseconds."""
    return times.now_iso("milliseconds")


@dataclass
class Saved:
    """Everything that survives a restart."""

    session_id: str | None = None
    model: str | None = None
    spec_sent: bool = False
    session_cost_usd: float = 0.0  # Claude Code's running total for the session
    cost_usd: float = 0.0  # the sum of the finished turns' costs
    turns: int = 0  # finished turns, including those no longer kept in `results`
    next_message_id: int = 1
    messages: list[Message] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    queue: list[str | dict[str, Any]] = field(default_factory=list)  # a task's text, or {content, result_schema}


def latest_output(messages: list[Message]) -> str | None:
    """The newest entry that is not the user's, stripped, its last `PREVIEW_CHARS` characters ('…' first when
    cut); None before the agent said anything."""
    for m in reversed(messages):
        if m.role != "user" and (text := m.content.strip()):
            return text if len(text) <= PREVIEW_CHARS else "…" + text[-(PREVIEW_CHARS - 1):]
    return None


def latest_task(saved: Saved) -> str | None:
    """The newest prompt in the conversation (a turn cut short by a restart included), else the last result's."""
    asked = next((m.content for m in reversed(saved.messages) if m.role == "user"), None)
    return asked if asked is not None else saved.results[-1].task if saved.results else None


class Store:
    """Loads and saves `Saved` at one path; a save that fails is logged and retried on the next change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Saved:
        """The saved state, or a fresh one when there is no file (an unreadable file is an error)."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Saved()
        except ValueError:
            raise ValueError(f"{self.path}: not a fleet runner state file (not JSON)") from None
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            raise ValueError(f"{self.path}: not a fleet runner state file (version {VERSION})")
        try:
            return self._parse(raw)
        except (TypeError, ValueError, AttributeError):  # pydantic's ValidationError is a ValueError
            raise ValueError(f"{self.path}: a fleet runner state file with unreadable fields") from None

    @staticmethod
    def _parse(raw: dict[str, Any]) -> Saved:
        return Saved(
            session_id=raw.get("session_id"), model=raw.get("model"), spec_sent=bool(raw.get("spec_sent")),
            session_cost_usd=float(raw.get("session_cost_usd") or 0.0), cost_usd=float(raw.get("cost_usd") or 0.0),
            turns=int(raw.get("turns") or 0),
            next_message_id=int(raw.get("next_message_id") or 1),
            messages=[Message.model_validate(m) for m in raw.get("messages", [])],
            results=[Result.model_validate(r) for r in raw.get("results", [])],
            queue=[q if isinstance(q, dict) and isinstance(q.get("content"), str) else str(q)
                   for q in raw.get("queue", [])])

    def save(self, saved: Saved) -> None:
        del saved.messages[:-MESSAGES_KEPT]
        del saved.results[:-RESULTS_KEPT]
        data = json.dumps({"version": VERSION, **{k: getattr(saved, k) for k in SCALARS},
                           "messages": [m.model_dump() for m in saved.messages],
                           "results": [r.model_dump() for r in saved.results], "queue": saved.queue},
                          ensure_ascii=False)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("could not save the runner state to %s: %s", self.path, exc.strerror or exc)
