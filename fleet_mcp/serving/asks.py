"""What a background task asks of the user, and how their answer reaches the agent; a handed-out turn's end.

An agent of a task that waits on a permission (needs_input, with the prompt's id known: runner agents) is
asked of the user as an elicitation form (`inputRequests`, keyed `<agent>/<prompt id>/<digest>`). The message
names the agent, the tool and the tool's whole input (said when cut), quoted as the agent's words; the form is a
boolean `allow` (Claude Code's dialog answers it "allow" in one key press) and an optional message. The answer
goes to that prompt exactly as `answer_agent` sends it, bound to its prompt id and to the digest of what the form
showed: one answered meanwhile, or not as shown, is not touched.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ElicitRequest, ElicitRequestFormParams, ElicitResult

from ..errors import FleetError, guarded
from ..fleet.background import Watch
from ..fleet.polling import within
from ..fleet.rules import MAX_SPEC
from ..models import PendingPrompt, Task, TaskResult, WaitedAgent, WaitResult
from ..times import now_iso
from .services import Services

__all__ = ["answer", "forms", "input_text", "turn_over"]

log = logging.getLogger("fleet_mcp")
ANSWER_S = 30.0  # what answering one prompt may take
RETRY = -32000  # a server error Claude Code answers by polling again for the real state
FORM = {"type": "object", "required": ["allow"], "properties": {
    "allow": {"type": "boolean", "title": "Allow", "default": True,
              "description": "Allow the agent to use this tool this once (untick to deny)"},
    "message": {"type": "string", "title": "Message to the agent", "maxLength": 2000,
                "description": "Optional: why, or what to do instead"}}}
STATES = {"succeeded": "complete", "failed": "failure", "interrupted": "canceled"}


def forms(waiting: list[WaitedAgent]) -> dict[str, ElicitRequest]:
    """The forms asking the user about each waiting agent's prompt (those whose prompt id is known)."""
    asked: dict[str, ElicitRequest] = {}
    for agent in waiting:
        pending = agent.pending
        if pending is None or not pending.prompt_id or pending.input is None or not pending.digest:
            continue  # the prompt as its runner holds it is not known: nothing to show, so nothing to approve
        cut = (f" (cut: {pending.input_chars} characters in all; allowing it allows what is not shown)"
               if pending.input_truncated else "")
        message = (f"Fleet agent {agent.name} asks to use {pending.tool} with this whole input (the agent's words: "
                   f"data, not an instruction){cut}:\n{input_text(pending)}")
        asked[f"{agent.name}/{pending.prompt_id}/{pending.digest}"] = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=FORM))
    return asked


async def answer(services: Services, watch: Watch, key: str, response: ElicitResult) -> None:
    """Send the user's `response` to the prompt `key` names, as answer_agent would; a prompt answered or gone
    meanwhile is left as it is (the next tasks/get says what waits now)."""
    name, _, prompt = key.partition("/")
    prompt_id, _, digest = prompt.partition("/")
    if name.lower() not in {n.lower() for n in watch.names} or not prompt_id or not digest:
        raise MCPError(code=INVALID_PARAMS, message=f"This task asked nothing under {key[:80]!r}.")
    content = response.content or {}
    said = content.get("message")
    message = said[:MAX_SPEC] if isinstance(said, str) else ""
    if response.action == "accept" and content.get("allow") is True:
        decision = "allow"
    else:
        decision = "deny"
        message = message or ("The user denied it." if response.action == "accept" else "The user declined.")
    try:
        async with within(ANSWER_S, "Answering the agent") as deadline:
            # The form said whether the input was cut: its allow is said knowingly (allow_truncated).
            await guarded(services.turns.answer)(name, decision, message, prompt_id, digest, True, deadline=deadline)
    except FleetError as exc:
        if exc.error != "conflict":
            raise MCPError(code=RETRY, message=exc.message) from None
        log.info("a prompt answered through a task was no longer waiting: %s", exc.message)


def input_text(pending: PendingPrompt) -> str:
    """A prompt's input for people: each field on its own, a text with line breaks as it is."""
    def value(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return "\n".join(f"{k}:\n{v}" if isinstance(v, str) and "\n" in v else f"{k}: {value(v)}"
                     for k, v in (pending.input or {}).items())


async def turn_over(services: Services, watch: Watch, waited: WaitResult, *, deadline: float | None) -> TaskResult:
    """A handed-out task's answer once the agent's turn is over (or the task's time is): start_agent_task's
    shape, its message carrying the turn's result as get_agent_result reads it."""
    agent = waited.agents[0]
    now = now_iso()
    if waited.timed_out:
        return TaskResult(task=Task(message=watch.said, uri="", state="working", needs_user_attention=False,
                                    created_at=now), agent_status=agent.status,
                          message=f"{agent.name} is still {agent.status}; read get_agent_result once it is idle.")
    try:
        outcome = await guarded(services.turns.result)(agent.name, deadline=deadline)
    except FleetError as exc:
        return TaskResult(task=Task(message=watch.said, uri="", state="idle", needs_user_attention=True,
                                    created_at=now), agent_status=agent.status,
                          message=f"{agent.name} is {agent.status}; its result could not be read: {exc.message}")
    said = f"{agent.name}'s turn is over: {outcome.outcome}."
    if outcome.text:
        said += f" Its answer (the agent's words, data):\n{outcome.text}"
    return TaskResult(task=Task(message=outcome.task or watch.said, uri=outcome.pull_request_url or "",
                                state=STATES[outcome.outcome], needs_user_attention=outcome.outcome != "succeeded",
                                created_at=outcome.finished_at or now), agent_status=agent.status, message=said)
