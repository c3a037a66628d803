"""Lenient models of the Coder payloads the client reads (on the base and field types of `lenient`).

Only fields a fleet server plausibly reads are declared; everything else is
ignored. A workspace (and all it holds) declares only what the fleet reads: a
listing of 1,000 real ones is 47 MB, and each field kept is an object made and
dropped per workspace. Enum-like values stay plain `str` so a new Coder release cannot break
parsing; nil slices, null strings and zero times read as `lenient` says.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator
from typing_extensions import TypedDict

from fleet_mcp.coder.lenient import EPOCH, LenientModel, ListOf, Text, Timestamp, Unescaped, parse_timestamp

__all__ = [
    "AgentHealth", "BuildInfo", "BuildResource", "BuildParameter", "LenientModel", "ListOf",
    "Organization", "ParameterOption", "Preset", "PresetParameter", "Presets", "ProvisionerJob",
    "AppHost", "Region", "RegionsPage", "RichParameter", "Template", "TemplateVersion", "Text", "Timestamp",
    "User", "UserRole", "Workspace", "WorkspaceAgent", "WorkspaceApp", "WorkspaceAppStatus",
    "WorkspaceBuild", "WorkspaceResource", "WorkspacesPage",
    "parse_timestamp",
]


# --- deployment, users, organizations -----------------------------------------


class BuildInfo(LenientModel):
    version: Text = ""
    external_url: Text = ""
    dashboard_url: Text = ""
    deployment_id: Text = ""


class UserRole(LenientModel):
    name: Text = ""
    display_name: Text = ""
    organization_id: Text = ""


class User(LenientModel):
    id: str
    username: str
    email: Text = ""
    name: Text = ""
    status: Text = ""
    roles: ListOf[UserRole] = Field(default_factory=list)
    organization_ids: ListOf[str] = Field(default_factory=list)


class Organization(LenientModel):
    id: str
    name: str
    display_name: Text = ""
    description: Text = ""
    icon: Text = ""
    is_default: bool = False
    created_at: Timestamp = None
    updated_at: Timestamp = None


class Region(LenientModel):
    id: Text = ""
    name: Text = ""
    display_name: Text = ""
    healthy: bool = True
    path_app_url: Text = ""
    wildcard_hostname: Text = ""


class AppHost(LenientModel):
    host: Text = ""


class RegionsPage(LenientModel):
    regions: ListOf[Region] = Field(default_factory=list)


# --- templates, versions, parameters, presets -----------------------------------


class Template(LenientModel):
    id: str
    name: str
    display_name: Text = ""
    description: Text = ""
    icon: Text = ""
    organization_id: Text = ""
    organization_name: Text = ""
    active_version_id: Text = ""
    deprecated: bool = False
    deprecation_message: Text = ""
    require_active_version: bool = False
    allow_user_cancel_workspace_jobs: bool = False
    allow_user_autostop: bool = True
    default_ttl_ms: int = 0
    use_classic_parameter_flow: bool = False
    created_at: Timestamp = None
    updated_at: Timestamp = None


class ProvisionerJob(LenientModel):
    status: Text = ""
    error: Text = ""


class TemplateVersion(LenientModel):
    id: str
    name: Text = ""
    template_id: Text = ""
    organization_id: Text = ""
    message: Text = ""
    archived: bool = False
    job: ProvisionerJob = ProvisionerJob()
    created_at: Timestamp = None
    updated_at: Timestamp = None


class ParameterOption(LenientModel):
    name: Text = ""
    value: Text = ""
    description: Text = ""
    icon: Text = ""


class RichParameter(LenientModel):
    name: str
    display_name: Text = ""
    description: Text = ""
    type: Text = ""
    form_type: Text = ""
    mutable: bool = False
    required: bool = False
    ephemeral: bool = False
    default_value: Text = ""
    options: ListOf[ParameterOption] = Field(default_factory=list)
    validation_regex: Text = ""
    validation_min: int | None = None
    validation_max: int | None = None
    validation_error: Text = ""


class PresetParameter(LenientModel):
    name: Text = Field("", validation_alias=AliasChoices("Name", "name"))
    value: Text = Field("", validation_alias=AliasChoices("Value", "value"))


class Preset(LenientModel):
    """A template version preset; real Coder sends PascalCase keys, the swagger lowercase."""

    id: str = Field(validation_alias=AliasChoices("ID", "id"))
    name: str = Field(validation_alias=AliasChoices("Name", "name"))
    description: Text = Field("", validation_alias=AliasChoices("Description", "description"))
    icon: Text = Field("", validation_alias=AliasChoices("Icon", "icon"))
    default: bool = Field(False, validation_alias=AliasChoices("Default", "default"))
    desired_prebuild_instances: int | None = Field(
        None,
        validation_alias=AliasChoices(
            "DesiredPrebuildInstances", "desiredPrebuildInstances", "desired_prebuild_instances"
        ),
    )
    parameters: ListOf[PresetParameter] = Field(
        default_factory=list, validation_alias=AliasChoices("Parameters", "parameters")
    )


# A version without presets answers `null`, not `[]`.
Presets = ListOf[Preset]


# --- workspaces and builds ---------------------------------------------------------


class WorkspaceAppStatus(LenientModel):
    """An app status; Coder stores its message HTML-escaped (UISanitize), so it is unescaped here."""

    id: Text = ""
    created_at: Timestamp = None
    state: Text = ""
    message: Unescaped = ""
    uri: Text = ""
    needs_user_attention: bool = False


class WorkspaceApp(LenientModel):
    """A workspace app; `statuses` are sorted newest first here (real Coder sends them unordered)."""

    id: str
    slug: str
    subdomain: bool = False
    subdomain_name: Text = ""
    health: Text = ""
    statuses: ListOf[WorkspaceAppStatus] = Field(default_factory=list)

    @field_validator("statuses")
    @classmethod
    def _newest_first(cls, statuses: list[WorkspaceAppStatus]) -> list[WorkspaceAppStatus]:
        if len(statuses) < 2:  # most apps of a real agent report nothing
            return statuses
        return sorted(statuses, key=lambda s: s.created_at or EPOCH, reverse=True)


class AgentHealth(LenientModel):
    reason: Text = ""


class WorkspaceAgent(LenientModel):
    id: str
    name: str
    status: Text = ""
    lifecycle_state: Text = ""
    health: AgentHealth = AgentHealth()
    apps: ListOf[WorkspaceApp] = Field(default_factory=list)
    last_connected_at: Timestamp = None
    disconnected_at: Timestamp = None


class WorkspaceResource(LenientModel):
    id: Text = ""
    name: Text = ""
    type: Text = ""
    agents: ListOf[WorkspaceAgent] = Field(default_factory=list)


class BuildResource(TypedDict, total=False):
    """A build's resource as a build is read: only its agents. A real build has a dozen resources without one
    (volumes, environment settings); as plain dicts they cost a listing of 1,000 no 12,000 models."""

    agents: ListOf[WorkspaceAgent]


class WorkspaceBuild(LenientModel):
    id: str
    build_number: int = 0
    template_version_id: Text = ""
    transition: Text = ""
    status: Text = ""
    job: ProvisionerJob = ProvisionerJob()
    resources: ListOf[BuildResource] = Field(default_factory=list)
    created_at: Timestamp = None
    updated_at: Timestamp = None

    @property
    def agents(self) -> list[WorkspaceAgent]:
        """Every agent of every resource of this build."""
        return [agent for resource in self.resources for agent in resource.get("agents", ())]


class Workspace(LenientModel):
    id: str
    name: str
    owner_name: Text = ""
    owner_id: Text = ""  # the owner as Coder says it: what a runner key is bound to (drivers/keys.py)
    template_id: Text = ""
    template_name: Text = ""
    template_display_name: Text = ""
    latest_build: WorkspaceBuild
    latest_app_status: WorkspaceAppStatus | None = None
    created_at: Timestamp = None
    updated_at: Timestamp = None

    @property
    def sends_app_statuses(self) -> bool:
        """Whether Coder sent app status fields at all (`latest_app_status`, or `statuses` on an app): a
        slimmer answer without them says nothing about the agent's turn, where an empty one says "none"."""
        return "latest_app_status" in self.model_fields_set or any(
            "statuses" in app.model_fields_set for agent in self.latest_build.agents for app in agent.apps)


class WorkspacesPage(LenientModel):
    """One page of `GET /api/v2/workspaces`; `count` is the total matching, not the page size."""

    workspaces: ListOf[Workspace] = Field(default_factory=list)
    count: int = 0


class BuildParameter(LenientModel):
    name: str
    value: Text = ""
