"""The MCP tools: flat parameters, annotations, descriptions for the calling model.

Each tool only hands its parameters to `Fleet`; `errors.Envelope` answers every
failure as the contract's error envelope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastmcp import Context, FastMCP
from pydantic import Field

from .errors import guarded
from .fleet import Fleet
from .models import (
    AgentList, AgentLog, AgentStatus, CreatedAgent, DeleteResult, Projects, Roles, ShownAgent, TaskHistory,
    TaskResult,
)

__all__ = ["register"]

AgentName = Annotated[str, Field(description="The agent's name, as create_agent was given it")]
Page = Annotated[int, Field(description="Page number, starting at 1")]
PageSize = Annotated[int, Field(description="Items per page; clamped to 1..100")]

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}


def _fleet(ctx: Context) -> Fleet:
    fleet: Fleet = ctx.lifespan_context["fleet"]
    return fleet


def register(mcp: FastMCP) -> None:
    """Add the fleet's tools to a FastMCP server whose lifespan yields {"fleet": Fleet}."""

    def tool(**options: Any) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
        return lambda fn: mcp.tool(**options)(guarded(fn))

    @tool(title="Create agent", annotations={"readOnlyHint": False, "destructiveHint": False,
                                                 "idempotentHint": False, "openWorldHint": True})
    async def create_agent(
        ctx: Context,
        name: Annotated[str, Field(description="Unique short name: 1-20 letters, digits and hyphens")],
        project: Annotated[str, Field(description="Project (Coder template) name or display name")],
        spec: Annotated[str, Field(description="What the agent should achieve: objective, context, deliverables")],
        role: Annotated[str, Field(description="Role from list_agent_roles, e.g. coder, operator, manager")] = "coder",
    ) -> CreatedAgent:
        """Create a Claude Code agent in its own Coder workspace; it starts working on `spec` once the
        workspace is up (a minute or two). The answer's status is `busy`; `workspace_status` tells the build."""
        return await _fleet(ctx).create(name, project, role, spec)

    @tool(title="List agents", annotations=READ)
    async def list_agents(
        ctx: Context,
        status: Annotated[AgentStatus | None, Field(description="Only agents with this status")] = None,
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

    @tool(title="Delete agent", annotations={"readOnlyHint": False, "destructiveHint": True,
                                                 "idempotentHint": True, "openWorldHint": True})
    async def delete_agent(ctx: Context, agent_name: AgentName) -> DeleteResult:
        """Delete an agent and destroy its workspace, even while it works. Cannot be undone."""
        return await _fleet(ctx).delete(agent_name)

    @tool(title="Start agent task", annotations={"readOnlyHint": False, "destructiveHint": False,
                                                     "idempotentHint": False, "openWorldHint": True})
    async def start_agent_task(
        ctx: Context, agent_name: AgentName,
        task_description: Annotated[str, Field(description="The task, as you would say it to the agent")],
    ) -> TaskResult:
        """Give an idle agent its next task. Refused with `conflict` while it is busy."""
        return await _fleet(ctx).start_task(agent_name, task_description)

    @tool(title="Cancel agent task", annotations={"readOnlyHint": False, "destructiveHint": True,
                                                      "idempotentHint": False, "openWorldHint": True})
    async def cancel_agent_task(ctx: Context, agent_name: AgentName) -> TaskResult:
        """Interrupt the agent's running task (like pressing ESC); the agent stays, ready for a new task."""
        return await _fleet(ctx).cancel_task(agent_name)

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
