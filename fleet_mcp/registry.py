"""The tool table: each tool with its title, hints and deadline; registering it on a server; and the
server's instructions, the workflow the calling model follows with the tools served.

`register` adds every tool of `TOOLS` to a FastMCP server within its deadline, each failure answered as
the contract's error envelope (`errors.guarded`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.dependencies import get_context
from fastmcp.tools import Tool
from fastmcp.utilities.json_schema import dereference_refs
from mcp.types import ToolAnnotations

from . import deadlines
from .deadlines import Deadline, deadline_of_a_read
from .errors import guarded
from .fleet.polling import within
from .serving.services import services_of
from .tools import (
    answer_agent,
    cancel_agent_task,
    create_agent,
    delete_agent,
    get_agent_result,
    list_agent_projects,
    list_agent_roles,
    list_agents,
    show_agent,
    show_agent_diff,
    show_agent_log,
    show_agent_task_history,
    show_agents,
    start_agent,
    start_agent_task,
    stop_agent,
    wait_for_agents,
)

__all__ = ["TOOLS", "ToolSpec", "instructions", "nullable_as_type", "register"]

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": True}


def nullable_as_type(schema: Any) -> Any:
    """`schema` with each optional scalar (`anyOf: [{type: T, ...}, {type: null}]`, pydantic's `T | None`)
    written `type: [T, "null"]`: the same rule, shorter in the calling model's context, and far cheaper for
    a client validating every answer (a JSON Schema validator tries each `anyOf` branch in turn)."""
    if isinstance(schema, list):
        return [nullable_as_type(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    node = {k: nullable_as_type(v) for k, v in schema.items()}
    branches = node.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        other = next(b for b in branches if b != {"type": "null"})
        if isinstance(other.get("type"), str) and not {"$ref", "anyOf", "oneOf", "allOf", "const"} & other.keys():
            node = {k: v for k, v in node.items() if k != "anyOf"} | other | {"type": [other["type"], "null"]}
            if "enum" in other:
                node["enum"] = [*other["enum"], None]
    return node


@dataclass(frozen=True)
class ToolSpec:
    """A tool function with what the server adds to it: title, hints, and its overall deadline."""

    fn: Callable[..., Awaitable[Any]]
    title: str
    hints: dict[str, bool]
    deadline: Deadline = deadline_of_a_read

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def reads_only(self) -> bool:
        return self.hints["readOnlyHint"]

    def tool(self) -> Tool:
        """The FastMCP tool: the function within its deadline, every failure a `FleetError`. The deadline is
        passed to the function as its `deadline` argument, which the tool's schema leaves out. Made once per
        process (parsing the function into schemas is most of building a server), a copy each server."""
        return self._made.model_copy()

    @functools.cached_property
    def _made(self) -> Tool:
        fn, deadline = self.fn, self.deadline

        @functools.wraps(fn)
        async def call(**arguments: Any) -> Any:
            seconds = deadline(services_of(get_context()).fleet.settings, arguments)
            async with within(seconds, fn.__name__) as ends:
                return await fn(**arguments, deadline=ends)

        signature = inspect.signature(fn)  # what FastMCP builds the schema from: all but `deadline`
        vars(call)["__signature__"] = signature.replace(
            parameters=[p for name, p in signature.parameters.items() if name != "deadline"])

        made = Tool.from_function(guarded(call), title=self.title, tags={"read" if self.reads_only else "write"},
                                  annotations=ToolAnnotations.model_validate(self.hints))
        # Inlined here, once: FastMCP's listing inlines every `$ref` of every tool on each tools/list otherwise.
        output = made.output_schema and dereference_refs(nullable_as_type(made.output_schema))
        return made.model_copy(update={"parameters": dereference_refs(made.parameters), "output_schema": output})


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(create_agent, "Create agent", WRITE, deadlines.create),
    ToolSpec(stop_agent, "Stop agent", {**WRITE, "idempotentHint": True}, deadlines.build),
    ToolSpec(start_agent, "Start agent", {**WRITE, "idempotentHint": True}, deadlines.build),
    ToolSpec(list_agents, "List agents", READ),
    ToolSpec(show_agent, "Show agent", READ),
    ToolSpec(show_agent_task_history, "Show agent task history", READ),
    ToolSpec(show_agent_log, "Show agent log", READ),
    ToolSpec(delete_agent, "Delete agent", {**WRITE, "destructiveHint": True, "idempotentHint": True},
             deadlines.build),
    ToolSpec(start_agent_task, "Start agent task", WRITE, deadlines.send),
    ToolSpec(cancel_agent_task, "Cancel agent task", {**WRITE, "destructiveHint": True}, deadlines.cancel),
    ToolSpec(answer_agent, "Answer agent", WRITE, deadlines.send),
    ToolSpec(get_agent_result, "Get agent result", READ),
    ToolSpec(show_agent_diff, "Show agent diff", READ),
    ToolSpec(wait_for_agents, "Wait for agents", READ, deadlines.wait),
    ToolSpec(show_agents, "Show agents", READ),
    ToolSpec(list_agent_roles, "List agent roles", READ),
    ToolSpec(list_agent_projects, "List agent projects", READ),
)


def register(mcp: FastMCP, *, read_only: bool = False) -> list[ToolSpec]:
    """Add the fleet's tools to a FastMCP server whose lifespan yields {"services"} or {"users"} (`users`);
    with `read_only`, the tools tagged `write` are hidden and cannot be called. Answers the tools served."""
    for spec in TOOLS:
        mcp.add_tool(spec.tool())
    if read_only:
        mcp.disable(tags={"write"})
    return [spec for spec in TOOLS if spec.reads_only or not read_only]


WORKFLOW = (
    "Hand whole pieces of work to Claude Code agents, each in its own Coder workspace, and keep working meanwhile.",
    "- Start: list_agent_projects (list_agent_roles), then create_agent with a short name and a spec saying the "
    "objective, the context and what to deliver. One agent per independent piece.",
    "- Wait, never poll: wait_for_agents with every name and until=[\"idle\", \"needs_input\"]; on timeout, call "
    "it again.",
    "- needs_input: show_agent names the pending prompt; answer_agent with its prompt_id, allow or deny (deny "
    "anything destructive or outside the task).",
    "- idle: get_agent_result, and review (show_agent_diff, show_agent_log) before trusting it. Follow up with "
    "start_agent_task; cancel_agent_task stops a task going wrong.",
    "- Best of N: create N agents with one spec, wait for all, compare them with show_agents, take the best "
    "(show_agent_diff format=patch), delete the rest.",
    "- Done: delete_agent (stop_agent pauses, start_agent resumes).",
)
WATCHING = (
    "This server is read-only: it watches a fleet of Claude Code agents, each in its own Coder workspace, and cannot "
    "create, task, answer or delete them.",
    "- list_agents for the fleet; show_agent or show_agents for details; wait_for_agents instead of polling.",
    "- get_agent_result, show_agent_diff and show_agent_log for what an agent did.",
)
ERRORS = "Errors are JSON objects {error, message, details}; `unavailable` with details.retry_after_s: retry then."


def instructions(served: Sequence[ToolSpec], *, read_only: bool = False) -> str:
    """The server's instructions: the workflow (what to call when), naming only the tools `served`. Clients put
    them in every turn of the calling model, so they stay short; each tool's own description says the rest."""
    names = {spec.name for spec in served}
    lines = WATCHING if read_only or not {"create_agent", "start_agent_task"} <= names else WORKFLOW
    return "\n".join([*lines, ERRORS])
