"""The MCP tools: flat parameters, their limits, and descriptions for the calling model.

Each tool is a plain async function that hands its parameters to the service FastMCP injects
(`Depends`: the caller's `Fleet`, `Lifecycle`, `Turns` or `Waits`), so it can be imported and called
alone. `registry.TOOLS` lists them with their title, hints and deadline, and adds them to a server; it
passes each call's deadline (loop time) as the function's last parameter, `deadline` (None: none), which
the tool's schema leaves out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastmcp import Context
from fastmcp.dependencies import CurrentContext, Depends
from pydantic import Field

from .fleet.agents import Fleet
from .fleet.background import Watch, offered
from .fleet.lifecycle import MAX_AUTOSTOP_MINUTES, Lifecycle
from .fleet.rules import MAX_NAME, MAX_SPEC, NAME_PATTERN, PATH_MAX
from .fleet.turns import DIFF_PAGE_MAX, Turns
from .fleet.waits import MAX_WAIT_S, Waits
from .models import (
    AgentDiff,
    AgentGlances,
    AgentList,
    AgentLog,
    AgentStatus,
    AnswerResult,
    Condition,
    CreatedAgent,
    DeleteResult,
    Projects,
    Roles,
    ShownAgent,
    TaskHistory,
    TaskResult,
    TurnOutcome,
    WaitResult,
)
from .serving.services import services_of

__all__ = [
    "answer_agent", "cancel_agent_task", "create_agent", "delete_agent", "fleet_of", "get_agent_result",
    "lifecycle_of", "list_agent_projects", "list_agent_roles", "list_agents", "show_agent", "show_agent_diff",
    "show_agent_log", "show_agent_task_history", "show_agents", "start_agent", "start_agent_task", "stop_agent",
    "turns_of", "wait_for_agents", "waits_of",
]

AgentName = Annotated[str, Field(description="The agent's name, as created")]
Page = Annotated[int, Field(ge=1, description="Page number, starting at 1")]
PageSize = Annotated[int, Field(description="Items per page; clamped to 1..100")]
# Characters, the closest a schema can say it: the rule itself counts UTF-8 bytes (`rules.check_text`).
Text = Field(min_length=1, max_length=MAX_SPEC)


# --- what FastMCP injects: the caller's services ----------------------------------------

def fleet_of(ctx: Context = CurrentContext()) -> Fleet:
    """The caller's `Fleet` (reads)."""
    return services_of(ctx).fleet


def lifecycle_of(ctx: Context = CurrentContext()) -> Lifecycle:
    """The caller's `Lifecycle` (create, stop, start, delete)."""
    return services_of(ctx).lifecycle


def turns_of(ctx: Context = CurrentContext()) -> Turns:
    """The caller's `Turns` (tasks, cancels, answers, results)."""
    return services_of(ctx).turns


def waits_of(ctx: Context = CurrentContext()) -> Waits:
    """The caller's `Waits` (waits and glances over many agents)."""
    return services_of(ctx).waits


# --- the tools ------------------------------------------------------------------------------

async def create_agent(
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN,
                               description="Unique short name: 1-20 letters, digits and hyphens")],
    project: Annotated[str, Field(description="Project (Coder template) name or display name")],
    spec: Annotated[str, Text, Field(description="What the agent should achieve: objective, context, "
                                                 "deliverables (at most 64 KiB of UTF-8)")],
    role: Annotated[str, Field(description="Role from list_agent_roles, e.g. coder, operator, manager")] = "coder",
    autostop_minutes: Annotated[int | None, Field(
        ge=1, le=MAX_AUTOSTOP_MINUTES,
        description="Stop the workspace after this many idle minutes (Coder's autostop; activity extends it)")
    ] = None,
    model: Annotated[str | None, Field(min_length=1, max_length=100, description="Model for this agent, e.g. "
                                       "haiku, sonnet, opus (runner projects only)")] = None,
    max_turns: Annotated[int | None, Field(ge=1, description="At most this many model turns per task (runner)")
                         ] = None,
    max_cost_usd: Annotated[float | None, Field(gt=0, description="Stop a task once it has cost this much in US "
                                                                  "dollars (runner)")] = None,
    result_schema: Annotated[dict[str, Any] | None, Field(
        description="A JSON Schema (at most 16 KiB) the spec's answer must fit, as start_agent_task's (runner "
                    "projects whose template declares fleet_mcp_result_schema)")] = None,
    lifecycle: Lifecycle = Depends(lifecycle_of),
    deadline: float | None = None,
) -> CreatedAgent:
    """Create a Claude Code agent in its own Coder workspace; it starts working on `spec` once the
    workspace is up (a minute or two). It is `busy` from now until its spec's turn ends (every tool says
    so); `workspace_status` tells where its build is. Refused with `conflict` when the fleet is at its cap."""
    return await lifecycle.create(name, project, role, spec, autostop_minutes=autostop_minutes,
                                  model=model, max_turns=max_turns, max_cost_usd=max_cost_usd,
                                  result_schema=result_schema, deadline=deadline)


async def stop_agent(agent_name: AgentName, lifecycle: Lifecycle = Depends(lifecycle_of),
                     deadline: float | None = None) -> ShownAgent:
    """Stop the agent's workspace to save cost; its conversation is kept and start_agent resumes it.
    Stopping a stopped agent answers it as it is."""
    return await lifecycle.stop(agent_name, deadline=deadline)


async def start_agent(agent_name: AgentName, lifecycle: Lifecycle = Depends(lifecycle_of),
                      deadline: float | None = None) -> ShownAgent:
    """Start a stopped agent's workspace again; the agent resumes its conversation (status `starting`, then
    `idle`)."""
    return await lifecycle.start(agent_name, deadline=deadline)


async def list_agents(
    status: Annotated[AgentStatus | None, Field(description="Only agents with this status (e.g. stopped, to "
                                                             "clean up)")] = None,
    project: Annotated[str | None, Field(description="Only agents of this project")] = None,
    fleet: Fleet = Depends(fleet_of),
    deadline: float | None = None,
) -> AgentList:
    """List the fleet's agents with their status (busy, idle, starting, offline, ...) and current task."""
    return await fleet.list_agents(status, project, deadline=deadline)


async def show_agent(agent_name: AgentName, fleet: Fleet = Depends(fleet_of),
                     deadline: float | None = None) -> ShownAgent:
    """Show one agent in detail: live status, role, project, spec, current task, pull request link,
    and why it is failed or offline when it is."""
    return await fleet.show(agent_name, deadline=deadline)


async def show_agent_task_history(
    agent_name: AgentName, page: Page = 1, page_size: PageSize = 20, fleet: Fleet = Depends(fleet_of),
    deadline: float | None = None,
) -> TaskHistory:
    """The agent's progress reports (working, complete, failure, idle), newest first, paginated."""
    return await fleet.history(agent_name, page, page_size, deadline=deadline)


async def show_agent_log(
    agent_name: AgentName, page: Page = 1, page_size: PageSize = 20, fleet: Fleet = Depends(fleet_of),
    deadline: float | None = None,
) -> AgentLog:
    """The agent's conversation (your tasks and its answers), newest first, paginated; each message is
    cut at 4,000 characters (`truncated` says so)."""
    return await fleet.log(agent_name, page, page_size, deadline=deadline)


async def delete_agent(agent_name: AgentName, lifecycle: Lifecycle = Depends(lifecycle_of),
                       deadline: float | None = None) -> DeleteResult:
    """Delete an agent and destroy its workspace, even while it works. Cannot be undone."""
    return await lifecycle.delete(agent_name, deadline=deadline)


async def start_agent_task(
    agent_name: AgentName,
    task_description: Annotated[str, Text, Field(description="The task, as you would say it to the agent")],
    if_busy: Annotated[Literal["reject", "queue", "interrupt"], Field(
        description="While the agent works: reject (a conflict error), queue (runs when the turn ends; "
                    "runner agents only) or interrupt (stop the turn, then send)")] = "reject",
    result_schema: Annotated[dict[str, Any] | None, Field(
        description="A JSON Schema (at most 16 KiB) the task's answer must fit; get_agent_result's `structured` "
                    "then holds the validated object, and an answer that does not fit fails the turn (runner "
                    "agents only)")] = None,
    turns: Turns = Depends(turns_of),
    deadline: float | None = None,
) -> TaskResult:
    """Give an agent its next task. While it is busy: refused with `conflict` (the default), queued, or sent
    after interrupting the running turn, as `if_busy` says."""
    started = await turns.start(agent_name, task_description, if_busy, result_schema, deadline=deadline)
    if (handover := offered.get()) is not None:  # the caller takes tasks: woken when the turn is over
        handover.watch = Watch.turn(agent_name, needs_input=turns.fleet.settings.tasks == "model", said=started.message)
    return started


async def cancel_agent_task(agent_name: AgentName, turns: Turns = Depends(turns_of),
                            deadline: float | None = None) -> TaskResult:
    """Interrupt the agent's running task (like pressing ESC); the agent stays, ready for a new task. Tasks
    queued behind it survive: the next starts at once, and the answer says so. The interrupted turn stays
    readable in get_agent_result (until another turn ends) and show_agent_task_history."""
    return await turns.cancel(agent_name, deadline=deadline)


async def answer_agent(
    agent_name: AgentName,
    prompt_id: Annotated[str, Field(min_length=1, max_length=100,
                                    description="The prompt you answer: its pending.prompt_id")],
    decision: Annotated[str, Field(pattern=r"^(allow|deny|[0-9]{1,2})$",
                                   description="allow or deny; on AgentAPI agents also a choice's number "
                                               "on the screen")],
    message: Annotated[str, Field(max_length=MAX_SPEC, description="Optional words to Claude (why, what "
                                                                   "instead)")] = "",
    digest: Annotated[str | None, Field(max_length=100, description=(
        "pending.digest as shown; required for runner agents: refused if the prompt differs"))] = None,
    allow_truncated: Annotated[bool, Field(description="Allow a prompt shown cut (pending.input_truncated), "
                                                       "unseen in part")] = False,
    turns: Turns = Depends(turns_of),
    deadline: float | None = None,
) -> AnswerResult:
    """Answer prompt `prompt_id` of an agent in `needs_input` (a tool permission, or a choice), then report
    its new status. Refused with `conflict` when that prompt no longer waits (answered, or another asked
    since) or is not what was shown (`digest`): the error shows what waits now. Never lands on another
    prompt; the answer names what it approved."""
    return await turns.answer(agent_name, decision, message, prompt_id, digest or "", allow_truncated,
                              deadline=deadline)


async def get_agent_result(agent_name: AgentName, turns: Turns = Depends(turns_of),
                           deadline: float | None = None) -> TurnOutcome:
    """The agent's last finished turn, compact: final text (cut at 4,000 characters),
    succeeded/failed/interrupted, pull-request link, and on runner agents turns, duration, cost (this turn
    and in total), `changes` (branch, commits, files changed with lines added and removed) and `structured`
    (the answer in the task's result_schema). Read show_agent_log for everything, show_agent_diff for the diff."""
    return await turns.result(agent_name, deadline=deadline)


async def show_agent_diff(
    agent_name: AgentName,
    scope: Annotated[Literal["task", "agent"], Field(
        description="task: what the last finished task changed; agent: everything since the agent was created"
    )] = "task",
    path: Annotated[str | None, Field(min_length=1, max_length=PATH_MAX,
                                      description="Only this file, relative to the repository's root")] = None,
    format: Annotated[Literal["unified", "patch"], Field(
        description="unified: each file's diff to read; patch: also the page's files as one patch that "
                    "`git apply` takes into your own checkout")] = "unified",
    page: Page = 1,
    page_size: Annotated[int, Field(description=f"Files per page; clamped to 1..{DIFF_PAGE_MAX}")] = 20,
    turns: Turns = Depends(turns_of),
    deadline: float | None = None,
) -> AgentDiff:
    """A runner agent's changes, committed or not, since its last task (or the agent) started, by file. A
    file's diff stops at 50,000 bytes, a page at 640 KB: what is left out is `truncated` with a note (ask
    by `path`); binaries are named only."""
    return await turns.diff(agent_name, scope, path, format, page, page_size, deadline=deadline)


async def wait_for_agents(
    ctx: Context,
    agent_names: Annotated[list[str], Field(min_length=1, max_length=100,
                                            description="The agents to wait on (1-100 names)")],
    until: Annotated[Condition | list[Condition], Field(
        description="What to wait for: idle (turn over), needs_input, stopped, failed, or a list of these")
    ] = "idle",
    mode: Annotated[Literal["all", "any"], Field(description="all: every agent; any: the first one")] = "all",
    timeout_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S, description="Give up after this many seconds")] = 120,
    waits: Waits = Depends(waits_of),
    deadline: float | None = None,
) -> WaitResult:
    """Block until all (or any) of the named agents reach a condition, or the timeout passes; instead of
    polling list_agents. Sends progress while it waits (agents done out of the group, at least every 5 s by
    default). Answers each agent's status, which met the
    condition, and `timed_out`. Tip: until=["idle", "needs_input"] also ends when an agent asks for
    permission."""

    async def progress(done: float, total: float, message: str) -> None:
        await ctx.report_progress(done, total, message)

    conditions = [until] if isinstance(until, str) else list(until)
    return await waits.wait(agent_names, conditions, mode, timeout_s, progress, deadline=deadline)


async def show_agents(
    agent_names: Annotated[list[str], Field(min_length=1, max_length=50,
                                            description="The agents to show (1-50 names)")],
    waits: Waits = Depends(waits_of),
    deadline: float | None = None,
) -> AgentGlances:
    """Many agents at a glance: each one's status, current task, a preview of its newest output (300
    characters), and how its last turn ended, what it cost and what it changed ("3 files, +120 −8"): give
    several agents one task, wait for all, then compare them here. An unknown name is an entry with an error,
    not a failed call."""
    return await waits.glance(agent_names, deadline=deadline)


async def list_agent_roles(
    project: Annotated[str, Field(description="Project name or display name")], fleet: Fleet = Depends(fleet_of),
    deadline: float | None = None,
) -> Roles:
    """The roles an agent of this project can take (each sets its system prompt)."""
    return await fleet.roles(project, deadline=deadline)


async def list_agent_projects(fleet: Fleet = Depends(fleet_of), deadline: float | None = None) -> Projects:
    """The projects (Coder templates ready for fleet agents) agents can be created in."""
    return await fleet.projects(deadline=deadline)
