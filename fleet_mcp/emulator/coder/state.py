"""The emulator's records: plain dataclasses, no behaviour beyond small helpers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

__all__ = [
    "Agent", "App", "AppStatus", "Build", "Job", "Organization", "ParameterSpec",
    "Preset", "Template", "TemplateVersion", "User", "Workspace", "new_id",
]


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class User:
    id: str
    username: str
    email: str
    name: str
    roles: list[str]  # site roles, e.g. ["owner"]
    created_at: datetime
    tokens: set[str] = field(default_factory=set)


@dataclass
class Organization:
    id: str
    name: str
    display_name: str
    is_default: bool
    created_at: datetime


@dataclass
class ParameterSpec:
    """A `coder_parameter` as a template version declares it."""

    name: str
    type: str = "string"
    display_name: str = ""
    description: str = ""
    form_type: str = ""
    default_value: str = ""
    required: bool = False
    mutable: bool = True
    ephemeral: bool = False
    options: list[dict[str, str]] = field(default_factory=list)  # {name, value, description, icon}
    validation_regex: str = ""
    validation_error: str = ""
    validation_min: int | None = None
    validation_max: int | None = None


@dataclass
class Preset:
    id: str
    name: str
    parameters: dict[str, str]
    description: str = ""
    icon: str = ""
    default: bool = False


@dataclass
class TemplateVersion:
    id: str
    template_id: str
    name: str
    parameters: list[ParameterSpec]
    presets: list[Preset]
    apps: list[str]  # app slugs the agent "main" exposes
    created_at: datetime
    subdomain_apps: list[str] = field(default_factory=list)  # of those, the ones declared `subdomain = true`
    build_error: str = ""  # non-empty: every build of this version fails with it
    startup_error: bool = False  # the agent's startup script fails (lifecycle start_error)


@dataclass
class Template:
    id: str
    organization_id: str
    name: str
    display_name: str
    description: str
    active_version_id: str
    created_by: str
    created_at: datetime
    updated_at: datetime
    allow_user_cancel_workspace_jobs: bool = False
    deprecated: bool = False
    icon: str = ""
    default_ttl_ms: int = 0
    activity_bump_ms: int = 3_600_000  # Coder's default: one hour
    allow_user_autostop: bool = True
    max_deadline_ms: int = 0  # emulator-only stand-in for an autostop requirement: a build's max_deadline


@dataclass
class Job:
    id: str
    created_at: datetime
    status: str = "pending"  # pending|running|succeeded|canceling|canceled|failed
    started_at: datetime | None = None
    completed_at: datetime | None = None
    canceled_at: datetime | None = None
    error: str = ""
    error_code: str = ""


@dataclass
class AppStatus:
    id: str
    created_at: datetime
    app_id: str
    agent_id: str
    state: str
    message: str
    uri: str


@dataclass
class App:
    id: str
    slug: str
    health: str = "initializing"  # disabled|initializing|healthy|unhealthy
    subdomain: bool = False  # reached by subdomain (`coder_app.subdomain = true`)


@dataclass
class Agent:
    id: str
    resource_id: str
    name: str
    created_at: datetime
    apps: list[App]
    status: str = "connecting"  # connecting|connected|disconnected|timeout
    lifecycle_state: str = "created"
    first_connected_at: datetime | None = None
    last_connected_at: datetime | None = None
    disconnected_at: datetime | None = None
    started_at: datetime | None = None
    ready_at: datetime | None = None
    auth_token: str = field(default_factory=new_id)  # CODER_AGENT_TOKEN: a UUIDv4, one per agent


@dataclass
class Build:
    id: str
    workspace_id: str
    build_number: int
    transition: str  # start|stop|delete
    template_version_id: str
    initiator_id: str
    reason: str
    job: Job
    created_at: datetime
    parameters: list[tuple[str, str]]
    preset_id: str | None = None
    resource_id: str = field(default_factory=new_id)
    agents: list[Agent] = field(default_factory=list)  # filled when a start job succeeds
    deadline: datetime | None = None  # autostop time of a start build (schedule.py)
    max_deadline: datetime | None = None

    @property
    def status(self) -> str:
        """The workspace status this build stands for (Coder's rule)."""
        job = self.job.status
        if job == "pending":
            return "pending"
        if job == "running":
            return {"start": "starting", "stop": "stopping", "delete": "deleting"}[self.transition]
        if job == "succeeded":
            return {"start": "running", "stop": "stopped", "delete": "deleted"}[self.transition]
        return job  # failed, canceling, canceled


@dataclass
class Workspace:
    id: str
    name: str
    owner_id: str
    organization_id: str
    template_id: str
    created_at: datetime
    updated_at: datetime
    builds: list[Build] = field(default_factory=list)  # oldest first
    app_ids: dict[str, str] = field(default_factory=dict)  # slug -> stable app id
    statuses: list[AppStatus] = field(default_factory=list)  # oldest first
    deleted: bool = False
    last_used_at: datetime | None = None
    ttl_ms: int | None = None  # the owner's autostop TTL

    @property
    def latest_build(self) -> Build:
        return self.builds[-1]
