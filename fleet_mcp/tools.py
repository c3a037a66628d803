"""The MCP tools: flat parameters, annotations, descriptions for the calling model.

Each tool only hands its parameters to `Fleet`; `errors.Envelope` answers every
failure as the contract's error envelope.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastmcp import Context, FastMCP
from fastmcp.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import Field

from . import deadlines
from .deadlines import Deadline, deadline_of_a_read
from .errors import guarded
from .polling import within
from .fleet import Fleet
from .lifecycle import Lifecycle
from .models import (
    AgentGlances, AgentList, AgentLog, AgentStatus, AnswerResult, Condition, CreatedAgent, DeleteResult, Projects,
    Roles, ShownAgent, TaskHistory, TaskResult, TurnOutcome, WaitResult,
)
from .turns import Turns
from .users import services_of
from .waits import Waits

__all__ = ["nullable_as_type", "register"]

AgentName = Annotated[str, Field(description="The agent's name, as create_agent was given it")]
Page = Annotated[int, Field(description="Page number, starting at 1")]
PageSize = Annotated[int, Field(description="Items per page; clamped to 1..100")]

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}


WAIT = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
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


def _fleet(ctx: Context) -> Fleet:
    return services_of(ctx).fleet


def _lifecycle(ctx: Context) -> Lifecycle:
    return services_of(ctx).lifecycle


def _turns(ctx: Context) -> Turns:
    return services_of(ctx).turns


def _waits(ctx: Context) -> Waits:
    return services_of(ctx).waits


def register(mcp: FastMCP) -> None:
    """Add the fleet's tools to a FastMCP server whose lifespan yields {"services"} or {"users"} (`users`)."""

    def tool(deadline: Deadline = deadline_of_a_read, **options: Any) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
        def add(fn: Callable[..., Awaitable[Any]]) -> Any:
            @functools.wraps(fn)
            async def call(**arguments: Any) -> Any:
                seconds = deadline(_fleet(arguments["ctx"]).settings, arguments)
                async with within(seconds, fn.__name__):
                    return await fn(**arguments)

            annotations = ToolAnnotations(**options.pop("annotations"))
            made = Tool.from_function(guarded(call), annotations=annotations, **options)
            return mcp.add_tool(made.model_copy(update={"output_schema": nullable_as_type(made.output_schema)}))

        return add

    @tool(title="Create agent", annotations=WRITE, deadline=deadlines.create)
    async def create_agent(
        ctx: Context,
        name: Annotated[str, Field(description="Unique short name: 1-20 letters, digits and hyphens")],
        project: Annotated[str, Field(description="Project (Coder template) name or display name")],
        spec: Annotated[str, Field(description="What the agent should achieve: objective, context, deliverables")],
        role: Annotated[str, Field(description="Role from list_agent_roles, e.g. coder, operator, manager")] = "coder",
        autostop_minutes: Annotated[int | None, Field(
            description="Stop the workspace after this many idle minutes (Coder's autostop; activity extends it)")
        ] = None,
        model: Annotated[str | None, Field(description="Model for this agent, e.g. haiku, sonnet, opus (runner "
                                                       "projects only)")] = None,
        max_turns: Annotated[int | None, Field(description="At most this many model turns per task (runner)")] = None,
        max_cost_usd: Annotated[float | None, Field(description="Stop a task once it has cost this much in US "
                                                                "dollars (runner)")] = None,
    ) -> CreatedAgent:
        """Create a Claude Code agent in its own Coder workspace; it starts working on `spec` once the
        workspace is up (a minute or two). The answer's status is `busy`; `workspace_status` tells the build.
        Refused with `conflict` when the fleet is at its cap."""
        return await _lifecycle(ctx).create(name, project, role, spec, autostop_minutes=autostop_minutes,
                                            model=model, max_turns=max_turns, max_cost_usd=max_cost_usd)

    @tool(title="Stop agent", annotations={**WRITE, "idempotentHint": True}, deadline=deadlines.build)
    async def stop_agent(ctx: Context, agent_name: AgentName) -> ShownAgent:
        """Stop the agent's workspace to save cost; its conversation is kept and start_agent resumes it.
        Stopping a stopped agent answers it as it is."""
        return await _lifecycle(ctx).stop(agent_name)

    @tool(title="Start agent", annotations={**WRITE, "idempotentHint": True}, deadline=deadlines.build)
    async def start_agent(ctx: Context, agent_name: AgentName) -> ShownAgent:
        """Start a stopped agent's workspace again; the agent resumes its conversation (status `starting`, then
        `idle`)."""
        return await _lifecycle(ctx).start(agent_name)

    @tool(title="List agents", annotations=READ)
    async def list_agents(
        ctx: Context,
        status: Annotated[AgentStatus | None, Field(description="Only agents with this status (e.g. stopped, to "
                                                                 "clean up)")] = None,
        project: Annotated[str | None, Field(description="Only agents of this project")] = None,
    ) -> AgentList:
        """List the fleet's agents with their status (busy, idle, starting, offline, ...) and current task."""
        return await _fleet(ctx).list_agents(status, project)

    @tool(title="Show agent", annotations=READ)
    async def show_agent(ctx: Context, agent_name: AgentName) -> ShownAgent:
        """Show one agent in detail: live status, role, project, spec, current task, pull request link,
        and why it is failed or offline when it is."""
        return await _fleet(ctx).show(agent_name)

    @tool(title="Show agent task history", annotations=READ)
    async def show_agent_task_history(
        ctx: Context, agent_name: AgentName, page: Page = 1, page_size: PageSize = 20,
    ) -> TaskHistory:
        """The agent's progress reports (working, complete, failure, idle), newest first, paginated."""
        return await _fleet(ctx).history(agent_name, page, page_size)

    @tool(title="Show agent log", annotations=READ)
    async def show_agent_log(
        ctx: Context, agent_name: AgentName, page: Page = 1, page_size: PageSize = 20,
    ) -> AgentLog:
        """The agent's conversation (your tasks and its answers), newest first, paginated; each message is
        cut at 4,000 characters (`truncated` says so)."""
        return await _fleet(ctx).log(agent_name, page, page_size)

    @tool(deadline=deadlines.build, title="Delete agent", annotations={"readOnlyHint": False, "destructiveHint": True,
                                                 "idempotentHint": True, "openWorldHint": True})
    async def delete_agent(ctx: Context, agent_name: AgentName) -> DeleteResult:
        """Delete an agent and destroy its workspace, even while it works. Cannot be undone."""
        return await _lifecycle(ctx).delete(agent_name)

    @tool(title="Start agent task", annotations=WRITE, deadline=deadlines.send)
    async def start_agent_task(
        ctx: Context, agent_name: AgentName,
        task_description: Annotated[str, Field(description="The task, as you would say it to the agent")],
        if_busy: Annotated[Literal["reject", "queue", "interrupt"], Field(
            description="While the agent works: reject (a conflict error), queue (runs when the turn ends; "
                        "runner agents only) or interrupt (stop the turn, then send)")] = "reject",
    ) -> TaskResult:
        """Give an agent its next task. While it is busy: refused with `conflict` (the default), queued, or sent
        after interrupting the running turn, as `if_busy` says."""
        return await _turns(ctx).start(agent_name, task_description, if_busy)

    @tool(title="Cancel agent task", annotations={**WRITE, "destructiveHint": True}, deadline=deadlines.cancel)
    async def cancel_agent_task(ctx: Context, agent_name: AgentName) -> TaskResult:
        """Interrupt the agent's running task (like pressing ESC); the agent stays, ready for a new task."""
        return await _turns(ctx).cancel(agent_name)

    @tool(title="Answer agent", annotations=WRITE, deadline=deadlines.send)
    async def answer_agent(
        ctx: Context, agent_name: AgentName,
        prompt_id: Annotated[str, Field(description="The prompt you answer: pending.prompt_id as show_agent, "
                                                    "list_agents, show_agents or wait_for_agents showed it")],
        decision: Annotated[str, Field(description="allow or deny the pending permission; on AgentAPI agents "
                                                   "also the number of a choice on the agent's screen")],
        message: Annotated[str, Field(description="Optional words to Claude with the answer (why, what "
                                                  "instead)")] = "",
    ) -> AnswerResult:
        """Answer the prompt `prompt_id` of an agent in `needs_input` (a permission to use a tool, or a choice),
        then report its new status. Refused with `conflict` when that prompt no longer waits (answered, timed
        out, or another one asked since): the error says what waits now. Never lands on another prompt."""
        return await _turns(ctx).answer(agent_name, decision, message, prompt_id)

    @tool(title="Get agent result", annotations=READ)
    async def get_agent_result(ctx: Context, agent_name: AgentName) -> TurnOutcome:
        """The agent's last finished turn, compact: final text (cut at 4,000 characters), succeeded/failed/
        interrupted, pull-request link, and on runner agents turns, duration and cost (this turn and in total).
        Read show_agent_log for everything."""
        return await _turns(ctx).result(agent_name)

    @tool(title="Wait for agents", annotations=WAIT, deadline=deadlines.wait)
    async def wait_for_agents(
        ctx: Context,
        agent_names: Annotated[list[str], Field(description="The agents to wait on (1-100 names)")],
        until: Annotated[Condition | list[Condition], Field(
            description="What to wait for: idle (turn over), needs_input, stopped, failed, or a list of these")
        ] = "idle",
        mode: Annotated[Literal["all", "any"], Field(description="all: every agent; any: the first one")] = "all",
        timeout_s: Annotated[float, Field(description="Give up after this many seconds (at most 1800)")] = 120,
    ) -> WaitResult:
        """Block until all (or any) of the named agents reach a condition, or the timeout passes; instead of
        polling list_agents. Sends progress while it waits. Answers each agent's status, which met the
        condition, and `timed_out`. Tip: until=["idle", "needs_input"] also ends when an agent asks for
        permission."""

        async def progress(done: float, total: float, message: str) -> None:
            await ctx.report_progress(done, total, message)

        conditions = [until] if isinstance(until, str) else list(until)
        return await _waits(ctx).wait(agent_names, conditions, mode, timeout_s, progress)

    @tool(title="Show agents", annotations=READ)
    async def show_agents(
        ctx: Context, agent_names: Annotated[list[str], Field(description="The agents to show (1-50 names)")],
    ) -> AgentGlances:
        """Many agents at a glance: each one's status, current task and a preview of its newest output (300
        characters). An unknown name is an entry with an error, not a failed call."""
        return await _waits(ctx).glance(agent_names)

    @tool(title="List agent roles", annotations=READ)
    async def list_agent_roles(
        ctx: Context, project: Annotated[str, Field(description="Project name or display name")],
    ) -> Roles:
        """The roles an agent of this project can take (each sets its system prompt)."""
        return await _fleet(ctx).roles(project)

    @tool(title="List agent projects", annotations=READ)
    async def list_agent_projects(ctx: Context) -> Projects:
        """The projects (Coder templates ready for fleet agents) agents can be created in."""
        return await _fleet(ctx).projects()
