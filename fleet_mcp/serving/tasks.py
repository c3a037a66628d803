"""MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) for the verbs that wait, kept stateless.

To a `tools/call` of `wait_for_agents` or `start_agent_task` from a client that declares the extension in
the request's capabilities (interactive Claude Code does; `claude -p` and the Agent SDK do not), the verb
looks once; if the wait is not over it answers `resultType: "task"` with an id that carries what it waits
on, signed (`taskids`). `tasks/get` looks once again, reading Coder afresh (the listing every wait of the
user shares): `working`, `completed` with exactly what the blocking call answers, or, while an agent of
the task waits on a permission and `FLEET_MCP_TASKS=human`, `input_required` with a form for the user
(`asks`). `tasks/update` answers that prompt as `answer_agent` would; `tasks/cancel` ends the task, never
the agents. Nothing is kept between requests: another replica, or this server restarted, answers the same id.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from fastmcp import Context
from fastmcp.server.extensions import MethodBinding, ServerExtension
from fastmcp.tools import ToolResult
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequestParams,
    ElicitRequest,
    ElicitResult,
    GetTaskRequestParams,
    RequestParams,
    Result,
    TaskStatus,
)
from pydantic import BaseModel, Field

from ..errors import FleetError, guarded
from ..fleet.background import Handover, Watch, offered
from ..fleet.polling import within
from ..models import WaitedAgent
from ..times import iso
from . import asks, taskids
from .services import Services, services_of

__all__ = ["TASKS", "CreatedTask", "DetailedTask", "FleetTasks", "UpdateTaskParams", "declared"]

log = logging.getLogger("fleet_mcp")
TASKS = "io.modelcontextprotocol/tasks"
BACKGROUND = frozenset({"wait_for_agents", "start_agent_task"})
LOOK_S = 20.0  # what one look (tasks/get) may take, Coder's retries included


class DetailedTask(Result):
    """A task as `tasks/get` answers it (SEP-2663): its state, and per state the form, result or error."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, ElicitRequest] | None = None
    result: CallToolResult | None = None
    error: dict[str, Any] | None = None


class CreatedTask(DetailedTask):
    """A `tools/call` answered as a task."""

    result_type: Literal["task"] = "task"


class UpdateTaskParams(RequestParams):
    """`tasks/update`: the client's answers to the task's input requests, by their keys."""

    task_id: str
    input_responses: dict[str, ElicitResult] = Field(default_factory=dict)


def declared(meta: Mapping[str, Any] | None) -> bool:
    """Whether a request's `_meta` declares the tasks extension among the client's capabilities."""
    capabilities = (meta or {}).get(CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS), Mapping)


def _iso(unix: float) -> str:
    return iso(datetime.fromtimestamp(unix, UTC), "milliseconds")


def _tool_result(answer: BaseModel) -> CallToolResult:
    """`answer` as its tool answers it: structured content, and the same as JSON text."""
    structured = answer.model_dump(mode="json")
    return CallToolResult(content=ToolResult(content=json.dumps(structured)).content, structured_content=structured)


class FleetTasks(ServerExtension):
    """The tasks extension: `wait_for_agents` and `start_agent_task` in the background, stateless."""

    identifier = TASKS

    def __init__(self, prompts: Literal["human", "model"], poll_interval_s: float) -> None:
        self.prompts = prompts
        self.poll_ms = max(250, min(10_000, round(poll_interval_s * 1000)))  # Claude Code waits at least 250 ms

    def methods(self) -> Sequence[MethodBinding]:
        return (MethodBinding("tasks/get", GetTaskRequestParams, self._get),
                MethodBinding("tasks/update", UpdateTaskParams, self._update),
                MethodBinding("tasks/cancel", CancelTaskRequestParams, self._cancel))

    async def intercept_tool_call(self, params: CallToolRequestParams, context: Context,
                                  call_next: Any) -> Any:
        meta = context.request_context.meta if context.request_context is not None else None
        if params.name not in BACKGROUND or not declared(meta) or not _fits(params.arguments or {}):
            return await call_next()
        handover = Handover()
        token = offered.set(handover)
        try:
            outcome = await call_next()
        finally:
            offered.reset(token)
        if handover.watch is None or getattr(outcome, "is_error", False):
            return outcome  # over at once, or refused: answered as the blocking call answers
        task_id = taskids.seal(handover.watch, _key(services_of(context)))
        if task_id is None:  # cannot happen for what `_fits` let through; answered as it stands
            return outcome
        return CreatedTask(**self._state(task_id, handover.watch, "working", handover.watch.said or None))

    def _state(self, task_id: str, watch: Watch, status: TaskStatus, said: str | None) -> dict[str, Any]:
        now = time.time()
        return {"task_id": task_id, "status": status, "status_message": said, "created_at": _iso(watch.started),
                "last_updated_at": _iso(now), "poll_interval_ms": self.poll_ms,
                "ttl_ms": max(0, round((watch.ends + taskids.KEEP_S - watch.started) * 1000))}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> DetailedTask:
        async with Context(fastmcp=self.server) as context:
            services = services_of(context)
            watch = _read(services, params.task_id)
            try:
                return await self._look(services, params.task_id, watch)
            except FleetError as exc:  # Coder unreachable for now: the task goes on; the client asks again
                return DetailedTask(**self._state(params.task_id, watch, "working",
                                                  f"Could not look just now ({exc.error}); looking again."))

    @guarded
    async def _look(self, services: Services, task_id: str, watch: Watch) -> DetailedTask:
        async with within(LOOK_S, "A look at a background task") as deadline:
            answer, agents, saying = await services.waits.look(watch, deadline=deadline)
            if answer is not None and watch.kind == "wait":
                return DetailedTask(**self._state(task_id, watch, "completed", answer.message),
                                    result=_tool_result(answer))
            if answer is not None:
                done = await asks.turn_over(services, watch, answer, deadline=deadline)
                return DetailedTask(**self._state(task_id, watch, "completed", done.message),
                                    result=_tool_result(done))
            waiting = [a for a in agents if a.status == "needs_input"] if self.prompts == "human" else []
            forms = asks.forms(waiting)
            if forms:
                return DetailedTask(**self._state(task_id, watch, "input_required", _asking(waiting)),
                                    input_requests=forms)
            return DetailedTask(**self._state(task_id, watch, "working", saying))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        async with Context(fastmcp=self.server) as context:
            services = services_of(context)
            watch = _read(services, params.task_id)
            for key, response in params.input_responses.items():
                await asks.answer(services, watch, key, response)
            return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> DetailedTask:
        async with Context(fastmcp=self.server) as context:
            watch = _read(services_of(context), params.task_id)
            return DetailedTask(**self._state(params.task_id, watch, "cancelled", "Cancelled: the wait is over; "
                                              "the agents go on as they were."))


def _asking(waiting: list[WaitedAgent]) -> str:
    names = ", ".join(a.name for a in waiting)
    return f"Waiting for your answer: {names} {'asks' if len(waiting) == 1 else 'ask'} permission to use a tool."


def _key(services: Services) -> bytes:
    token = services.fleet.settings.coder_session_token
    assert token is not None  # every Services acts with a token: the server's, or its caller's
    return taskids.key_for(token.get_secret_value())


def _read(services: Services, task_id: str) -> Watch:
    """The watch `task_id` carries, or the JSON-RPC error (-32602) Claude Code reads as unknown or expired."""
    try:
        return taskids.read(task_id, _key(services), time.time())
    except taskids.Expired as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"Task expired: {exc}") from None
    except taskids.Unknown:
        raise MCPError(code=INVALID_PARAMS, message="Unknown task: not one of this server's for this user "
                                                    "(or its user's Coder token changed since)") from None


def _fits(arguments: Mapping[str, Any]) -> bool:
    """Whether the call's task id would fit `taskids.MAX_ID` (a wait on very many long names blocks instead)."""
    names = arguments.get("agent_names")
    if not isinstance(names, list):
        return True
    until = arguments.get("until", "idle")
    probe = Watch("wait", tuple(str(n) for n in names), tuple(until if isinstance(until, list) else [until]),
                  "all", time.time(), time.time())
    return taskids.seal(probe, b"probe") is not None

