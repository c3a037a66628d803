"""A client that declares MCP Tasks (as interactive Claude Code does)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Literal

from mcp import ClientSession
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, TypeAdapter

Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


class Created(Result):
    """A `tools/call` answered with a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TasksClient:
    """The tasks extension as a client runs it: a `tools/call` answered `resultType: "task"` is polled with
    `tasks/get` until it is over (its result then answers the call); an `input_required` poll is answered with
    `tasks/update`, each form by `answer(key, params)` (an `ElicitResult`). Records what it saw."""

    def __init__(self, answer: Answer | None = None, pause_s: float = 0.01) -> None:
        self.answer = answer
        self.pause_s = pause_s
        self.created: list[dict[str, Any]] = []  # the task answers of tools/call
        self.polls: list[dict[str, Any]] = []  # every tasks/get answer

    def extension(self) -> ClientExtension:
        outer = self

        class Extension(ClientExtension):
            identifier = "io.modelcontextprotocol/tasks"

            def claims(self) -> Sequence[ResultClaim[Any]]:
                return [ResultClaim(result_type="task", model=Created, resolve=outer._resolve)]

        return Extension()

    async def request(self, session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A raw tasks/* request on `session`; its answer as a dict."""

        class Params(RequestParams):
            model_config = ConfigDict(extra="allow")

        class Raw(Request[Params, Literal[method]]):  # type: ignore[valid-type]
            name_param = "taskId"

        # mcp bounds the result type to BaseModel, though it validates through any TypeAdapter given.
        answer: dict[str, Any] = await session.send_request(  # type: ignore[type-var]
            Raw(method=method, params=Params(**params)), TypeAdapter(dict[str, Any]))
        return answer

    async def _resolve(self, created: Created, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created.model_dump(by_alias=True, mode="json"))
        while True:
            await asyncio.sleep(self.pause_s)
            state = await self.request(ctx.session, "tasks/get", {"taskId": created.task_id})
            self.polls.append(state)
            if state["status"] == "completed":
                return CallToolResult.model_validate(state["result"])
            if state["status"] in ("failed", "cancelled"):
                raise AssertionError(f"task ended {state['status']}: {state}")
            if state["status"] == "input_required":
                if self.answer is None:
                    raise AssertionError(f"the task asks for input and this client answers none: {state}")
                answers = {key: self.answer(key, asked["params"]) for key, asked in state["inputRequests"].items()}
                await self.request(ctx.session, "tasks/update", {"taskId": created.task_id, "inputResponses": answers})
