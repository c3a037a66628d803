"""Lenient models of the Coder payloads the client reads (on the base and field types of `lenient`).

Only fields a fleet server plausibly reads are declared; everything else is
ignored. A workspace (and all it holds) declares only what the fleet reads, as
msgspec structs (`LenientStruct`): a listing of 1,000 real ones is 47 MB, and
each field kept is an object made and dropped per workspace. Enum-like values
stay plain `str` so a new Coder release cannot break parsing; nil slices, null
strings and zero times read as `lenient` says.
"""

from __future__ import annotations

import html
from typing import Any

import msgspec
from msgspec import UNSET
from msgspec.structs import force_setattr
from pydantic import AliasChoices, Field

from fleet_mcp.coder.lenient import (
    EPOCH,
    LenientModel,
    LenientStruct,
    ListOf,
    Text,
    Timestamp,
    Unescaped,
    lenient_fields,
    parse_timestamp,
)

__all__ = [
    "AgentHealth", "BuildInfo", "BuildParameter", "LenientModel", "ListOf",
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


class ProvisionerJob(LenientStruct, frozen=True, kw_only=True):
    status: Text = ""
    error: Text = ""


class TemplateVersion(LenientStruct, frozen=True, kw_only=True):
    id: str
    name: Text = ""
    template_id: Text = ""
    organization_id: Text = ""
    message: Text = ""
    archived: bool = False
    job: ProvisionerJob = ProvisionerJob()
    created_at: Timestamp = None
    updated_at: Timestamp = None

    def __post_init__(self) -> None:
        lenient_fields(self)


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


# --- workspaces and builds: msgspec structs (a listing of 1,000 real ones is 47 MB) --------------------------

_UNSENT: Any = UNSET  # the default of a field whose absence says something (`_sent`)


def _sent(value: object) -> bool:
    return value is not UNSET


def _read_times(struct: LenientStruct, first: str, second: str) -> None:
    """Two `Timestamp` fields read as `lenient_fields` reads them (most are aware and not zero: left as they are)."""
    for name in (first, second):
        stamp = getattr(struct, name)
        if stamp is not None and (stamp.tzinfo is None or stamp.year == 1):
            force_setattr(struct, name, parse_timestamp(stamp))


class WorkspaceAppStatus(LenientStruct, frozen=True, kw_only=True):
    """An app status; Coder stores its message HTML-escaped (UISanitize), so it is unescaped here."""

    id: Text = ""
    created_at: Timestamp = None
    state: Text = ""
    message: Unescaped = ""
    uri: Text = ""
    needs_user_attention: bool = False

    def __post_init__(self) -> None:  # `lenient_fields`, spelt out: a listing of 1,000 holds ~6,000
        stamp = self.created_at
        if stamp is not None and (stamp.tzinfo is None or stamp.year == 1):
            force_setattr(self, "created_at", parse_timestamp(stamp))
        if "&" in self.message:
            force_setattr(self, "message", html.unescape(self.message))


class WorkspaceApp(LenientStruct, frozen=True, kw_only=True):
    """A workspace app; `statuses` are sorted newest first here (real Coder sends them unordered).
    `statuses_sent`: whether the answer had the field at all (set here, whatever the answer says)."""

    slug: str
    subdomain: bool = False
    subdomain_name: Text = ""
    health: Text = ""
    statuses: ListOf[WorkspaceAppStatus] = msgspec.field(default=_UNSENT)
    statuses_sent: bool = True

    def __post_init__(self) -> None:  # `lenient_fields`, spelt out: a listing of 1,000 holds ~5,000
        statuses = self.statuses
        if not statuses:  # most apps of a real agent report nothing
            sent = _sent(statuses)
            if self.statuses_sent is not sent:
                force_setattr(self, "statuses_sent", sent)
            if statuses is not None and sent:
                return
            force_setattr(self, "statuses", [])
        else:
            if not self.statuses_sent:
                force_setattr(self, "statuses_sent", True)
            if len(statuses) > 1:
                force_setattr(self, "statuses", sorted(statuses, key=lambda s: s.created_at or EPOCH, reverse=True))


class AgentHealth(LenientStruct, frozen=True, kw_only=True):
    reason: Text = ""


class WorkspaceAgent(LenientStruct, frozen=True, kw_only=True):
    name: str
    status: Text = ""
    lifecycle_state: Text = ""
    health: AgentHealth = AgentHealth()
    apps: ListOf[WorkspaceApp] = msgspec.field(default_factory=list)
    last_connected_at: Timestamp = None
    disconnected_at: Timestamp = None

    def __post_init__(self) -> None:  # `lenient_fields`, spelt out: a listing of 1,000 holds 1,000
        if self.apps is None:
            force_setattr(self, "apps", [])
        _read_times(self, "last_connected_at", "disconnected_at")


class WorkspaceResource(LenientStruct, frozen=True, kw_only=True):
    """A build's resource (a container, a volume, an environment setting): only its agents, None for none (Coder
    omits them). A real build has a dozen resources without one, 13,000 in a listing of 1,000: each field kept
    would be as many strings made and dropped, and the fleet reads none but the agents."""

    agents: list[WorkspaceAgent] | None = None


class WorkspaceBuild(LenientStruct, frozen=True, kw_only=True):
    id: str
    build_number: int = 0
    template_version_id: Text = ""
    transition: Text = ""
    status: Text = ""
    job: ProvisionerJob = ProvisionerJob()
    resources: ListOf[WorkspaceResource] = msgspec.field(default_factory=list)
    created_at: Timestamp = None
    updated_at: Timestamp = None

    def __post_init__(self) -> None:  # `lenient_fields`, spelt out
        if self.resources is None:
            force_setattr(self, "resources", [])
        _read_times(self, "created_at", "updated_at")

    @property
    def agents(self) -> list[WorkspaceAgent]:
        """Every agent of every resource of this build."""
        return [agent for resource in self.resources for agent in resource.agents or ()]


class Workspace(LenientStruct, frozen=True, kw_only=True):
    """A workspace. `sends_app_statuses`: whether Coder sent app status fields at all (`latest_app_status`, or
    `statuses` on an app), set here whatever the answer says: a slimmer answer without them says nothing
    about the agent's turn, where an empty one says "none"."""

    id: str
    name: str
    owner_name: Text = ""
    owner_id: Text = ""  # the owner as Coder says it: what a runner key is bound to (drivers/keys.py)
    template_id: Text = ""
    template_name: Text = ""
    template_display_name: Text = ""
    latest_build: WorkspaceBuild
    latest_app_status: WorkspaceAppStatus | None = msgspec.field(default=_UNSENT)
    created_at: Timestamp = None
    updated_at: Timestamp = None
    sends_app_statuses: bool = True

    def __post_init__(self) -> None:
        sent = _sent(self.latest_app_status)
        if not sent:
            force_setattr(self, "latest_app_status", None)
            sent = any(app.statuses_sent for agent in self.latest_build.agents for app in agent.apps)
        force_setattr(self, "sends_app_statuses", sent)
        _read_times(self, "created_at", "updated_at")  # `lenient_fields`, spelt out


class WorkspacesPage(LenientStruct, frozen=True, kw_only=True):
    """One page of `GET /api/v2/workspaces`; `count` is the total matching, not the page size."""

    workspaces: ListOf[Workspace] = msgspec.field(default_factory=list)
    count: int = 0

    def __post_init__(self) -> None:
        lenient_fields(self)


class BuildParameter(LenientModel):
    name: str
    value: Text = ""
