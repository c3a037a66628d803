"""The MCP tools: flat parameters, annotations, descriptions for the calling model.

Each tool only hands its parameters to `Fleet` and turns a `FleetError` into
the contract's error envelope; infrastructure faults become `unavailable`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import pydantic
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.exceptions import ValidationError as ArgumentsError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from pydantic import Field

from .coder import errors as ce
from .fleet import Fleet
from .models import (
    AgentList, AgentLog, AgentStatus, CreatedAgent, DeleteResult, FleetError, Projects, Roles, ShownAgent,
    TaskHistory, TaskResult,
)

__all__ = ["Envelope", "register"]

log = logging.getLogger("fleet_mcp")
T = TypeVar("T")

AgentName = Annotated[str, Field(description="The agent's name, as create_agent was given it")]
Page = Annotated[int, Field(description="Page number, starting at 1")]
PageSize = Annotated[int, Field(description="Items per page; clamped to 1..100")]

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}


def _fleet(ctx: Context) -> Fleet:
    return ctx.lifespan_context["fleet"]


async def _run(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except FleetError as exc:
        raise ToolError(exc.envelope(), log_level=logging.INFO) from None
    except ce.Unauthorized:
        raise ToolError(FleetError("unauthorized", "Coder refused the session token; check "
                                   "CODER_SESSION_TOKEN.").envelope()) from None
    except ce.Gone:  # 410: the workspace was deleted while the call ran
        raise ToolError(FleetError("not_found", "The agent's workspace has been deleted.", {"status": 410})
                        .envelope(), log_level=logging.INFO) from None
    except ce.CoderError as exc:
        log.warning("Coder request failed: %s", exc)
        raise ToolError(FleetError("unavailable", f"Coder could not complete the request: {exc.message}",
                                   {"status": exc.status}).envelope()) from None
    except Exception as exc:  # noqa: BLE001 - FastMCP would answer str(exc); no detail leaves the server
        log.error("unexpected %s in a tool", type(exc).__name__)
        raise ToolError(FleetError("unavailable", "The fleet server hit an unexpected problem; try again.")
                        .envelope()) from None


class Envelope(Middleware):
    """Arguments the schema refuses, and anything unforeseen, answer as the contract's envelope too.

    The model sees `bad_request` naming the fields (never echoing their values);
    an unexpected fault is logged by type only and answered as `unavailable`.
    """

    async def on_call_tool(self, context: MiddlewareContext, call_next):
        try:
            return await call_next(context)
        except ToolError:
            raise
        except ArgumentsError as exc:
            cause = exc.__cause__
            problems = [{"field": ".".join(map(str, e["loc"])) or "arguments", "problem": e["msg"]}
                        for e in cause.errors(include_input=False, include_url=False)] \
                if isinstance(cause, pydantic.ValidationError) else []
            fields = ", ".join(p["field"] for p in problems) or "arguments"
            raise ToolError(FleetError("bad_request", f"Invalid arguments: {fields}.", {"problems": problems})
                            .envelope(), log_level=logging.INFO) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no trace leaves the server
            log.error("unexpected %s in tool %s", type(exc).__name__, context.message.name)
            raise ToolError(FleetError("unavailable", "The fleet server hit an unexpected problem; try again.")
                            .envelope()) from None


def register(mcp: FastMCP) -> None:
    """Add the ten fleet tools to a FastMCP server whose lifespan yields {"fleet": Fleet}."""

    @mcp.tool(title="Create agent", annotations={"readOnlyHint": False, "destructiveHint": False,
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
        return await _run(lambda: _fleet(ctx).create(name, project, role, spec))

    @mcp.tool(title="List agents", annotations=READ)
    async def list_agents(
        ctx: Context,
        status: Annotated[AgentStatus | None, Field(description="Only agents with this status")] = None,
        project: Annotated[str | None, Field(description="Only agents of this project")] = None,
    ) -> AgentList:
        """List the fleet's agents with their status (busy, idle, starting, offline, ...) and current task."""
        return await _run(lambda: _fleet(ctx).list(status, project))

    @mcp.tool(title="Show agent", annotations=READ)
    async def show_agent(ctx: Context, agent_name: AgentName) -> ShownAgent:
        """Show one agent in detail: live status, role, project, spec, current task, pull request link,
        and why it is failed or offline when it is."""
        return await _run(lambda: _fleet(ctx).show(agent_name))

    @mcp.tool(title="Show agent task history", annotations=READ)
    async def show_agent_task_history(
        ctx: Context, agent_name: AgentName, page: Page = 1, page_size: PageSize = 20,
    ) -> TaskHistory:
        """The agent's progress reports (working, complete, failure, idle), newest first, paginated."""
        return await _run(lambda: _fleet(ctx).history(agent_name, page, page_size))

    @mcp.tool(title="Show agent log", annotations=READ)
    async def show_agent_log(
        ctx: Context, agent_name: AgentName, page: Page = 1, page_size: PageSize = 20,
    ) -> AgentLog:
        """The agent's conversation (your tasks and its answers), newest first, paginated; each message is
        cut at 4,000 characters (`truncated` says so)."""
        return await _run(lambda: _fleet(ctx).log(agent_name, page, page_size))

    @mcp.tool(title="Delete agent", annotations={"readOnlyHint": False, "destructiveHint": True,
                                                 "idempotentHint": True, "openWorldHint": True})
    async def delete_agent(ctx: Context, agent_name: AgentName) -> DeleteResult:
        """Delete an agent and destroy its workspace, even while it works. Cannot be undone."""
        return await _run(lambda: _fleet(ctx).delete(agent_name))

    @mcp.tool(title="Start agent task", annotations={"readOnlyHint": False, "destructiveHint": False,
                                                     "idempotentHint": False, "openWorldHint": True})
    async def start_agent_task(
        ctx: Context, agent_name: AgentName,
        task_description: Annotated[str, Field(description="The task, as you would say it to the agent")],
    ) -> TaskResult:
        """Give an idle agent its next task. Refused with `conflict` while it is busy."""
        return await _run(lambda: _fleet(ctx).start_task(agent_name, task_description))

    @mcp.tool(title="Cancel agent task", annotations={"readOnlyHint": False, "destructiveHint": True,
                                                      "idempotentHint": False, "openWorldHint": True})
    async def cancel_agent_task(ctx: Context, agent_name: AgentName) -> TaskResult:
        """Interrupt the agent's running task (like pressing ESC); the agent stays, ready for a new task."""
        return await _run(lambda: _fleet(ctx).cancel_task(agent_name))

    @mcp.tool(title="List agent roles", annotations=READ)
    async def list_agent_roles(
        ctx: Context, project: Annotated[str, Field(description="Project name or display name")],
    ) -> Roles:
        """The roles an agent of this project can take (each sets its system prompt)."""
        return await _run(lambda: _fleet(ctx).roles(project))

    @mcp.tool(title="List agent projects", annotations=READ)
    async def list_agent_projects(ctx: Context) -> Projects:
        """The projects (Coder templates ready for fleet agents) agents can be created in."""
        return await _run(lambda: _fleet(ctx).projects())
