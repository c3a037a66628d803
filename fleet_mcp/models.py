"""What the tools answer: the contract's output shapes (errors are in `errors`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "Agent", "AgentList", "AgentLog", "AgentStatus", "AgentSummary", "CreatedAgent", "DeletedAgent",
    "DeleteResult", "LogMessage", "Metadata", "Project", "Projects", "Role", "Roles",
    "ShownAgent", "Task", "TaskHistory", "TaskResult",
]

AgentStatus = Literal[
    "pending", "starting", "busy", "idle", "stopping", "stopped", "failed",
    "canceling", "canceled", "deleting", "deleted", "offline",
]


class Metadata(BaseModel):
    """The agent's `fleet_mcp_*` values: build parameters, or derived where noted."""

    fleet_mcp_agent_name: str
    fleet_mcp_role: str
    fleet_mcp_project: str
    fleet_mcp_agent_spec: str
    fleet_mcp_current_task: str | None = None
    fleet_mcp_pull_request_url: str | None = Field(None, description="Newest pull-request link the agent reported")
    fleet_mcp_pull_request_status: str | None = None
    fleet_mcp_pull_request_check_status: str | None = None


class Agent(BaseModel):
    name: str
    workspace_id: str
    status: AgentStatus
    workspace_status: str = Field(description="The Coder workspace's build status, e.g. pending, running, stopped")
    role: str
    project: str
    spec: str
    current_task: str | None
    created_at: str
    updated_at: str
    problem: str | None = Field(None, description="Why the agent is failed or offline, when known")
    metadata: Metadata


class CreatedAgent(BaseModel):
    agent: Agent
    message: str


class ShownAgent(BaseModel):
    agent: Agent


class AgentSummary(BaseModel):
    name: str
    status: AgentStatus
    current_task: str | None
    project: str


class AgentList(BaseModel):
    agents: list[AgentSummary]
    total_count: int


class Task(BaseModel):
    message: str
    uri: str
    state: str = Field(description="working, complete, failure or idle, as the agent reported")
    needs_user_attention: bool
    created_at: str


class TaskHistory(BaseModel):
    tasks: list[Task]
    total_count: int
    page: int
    page_size: int
    total_pages: int


class TaskResult(BaseModel):
    task: Task
    agent_status: AgentStatus
    message: str


class DeletedAgent(BaseModel):
    name: str
    workspace_id: str


class DeleteResult(BaseModel):
    message: str
    deleted_agent: DeletedAgent


class Role(BaseModel):
    name: str
    display_name: str
    description: str


class Roles(BaseModel):
    roles: list[Role]


class Project(BaseModel):
    name: str
    display_name: str
    description: str
    template_id: str
    template_name: str


class Projects(BaseModel):
    projects: list[Project]


class LogMessage(BaseModel):
    id: int
    role: str
    content: str
    truncated: bool
    time: str | None


class AgentLog(BaseModel):
    messages: list[LogMessage]
    total_count: int
    page: int
    page_size: int
    total_pages: int
