"""Coder's JSON shapes for the emulator's records (codersdk field names and casing).

Times are written as Go writes them (RFC 3339, trailing zeros of the fraction
trimmed) in the deployment's zone, +01:00 as in the recorded answers, so that
clients meet real offsets.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from .schedule import effective_ttl_ms
from .state import (
    Agent,
    App,
    AppStatus,
    Build,
    Job,
    Organization,
    ParameterSpec,
    Preset,
    Template,
    TemplateVersion,
    User,
    Workspace,
)

if TYPE_CHECKING:
    from .backend import Backend

__all__ = [
    "app_status_json", "build_json", "org_json", "parameter_json", "preset_json",
    "template_json", "ts", "user_json", "version_json", "version_resources_json", "workspace_json",
]

ZONE = timezone(timedelta(hours=1))
NIL_UUID = "00000000-0000-0000-0000-000000000000"


def ts(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    text = dt.astimezone(ZONE).isoformat(timespec="microseconds")
    head, _, tail = text.partition(".")
    fraction, offset = tail[:6].rstrip("0"), tail[6:]
    return f"{head}.{fraction}{offset}" if fraction else f"{head}{offset}"


def user_json(u: User, b: Backend) -> dict:
    return {
        "id": u.id, "username": u.username, "email": u.email, "name": u.name,
        "created_at": ts(u.created_at), "updated_at": ts(u.created_at), "last_seen_at": ts(b.now()),
        "status": "active", "login_type": "password", "avatar_url": "", "theme_preference": "",
        "is_service_account": False, "has_ai_seat": False,
        "organization_ids": [o.id for o in b.orgs.values()],
        "roles": [{"name": r, "display_name": r.replace("-", " ").title()} for r in u.roles],
    }


def org_json(o: Organization) -> dict:
    return {
        "id": o.id, "name": o.name, "display_name": o.display_name, "description": "Builtin default organization."
        if o.is_default else "", "icon": "", "created_at": ts(o.created_at), "updated_at": ts(o.created_at),
        "is_default": o.is_default,
    }


def template_json(t: Template, b: Backend) -> dict:
    org = b.orgs[t.organization_id]
    author = b.users[t.created_by]
    stats = {"P50": 2000, "P95": 4000}
    return {
        "id": t.id, "created_at": ts(t.created_at), "updated_at": ts(t.updated_at),
        "organization_id": org.id, "organization_name": org.name, "organization_display_name": org.display_name,
        "organization_icon": "", "name": t.name, "display_name": t.display_name, "provisioner": "terraform",
        "active_version_id": t.active_version_id,
        "active_user_count": len({w.owner_id for w in b.workspaces.values()
                                  if w.template_id == t.id and not w.deleted}),
        "build_time_stats": {"start": stats, "stop": stats, "delete": stats},
        "description": t.description, "deprecated": t.deprecated, "deprecation_message": "", "deleted": False,
        "icon": t.icon, "default_ttl_ms": t.default_ttl_ms, "activity_bump_ms": t.activity_bump_ms,
        "autostop_requirement": {"days_of_week": [], "weeks": 1},
        "autostart_requirement": {"days_of_week": ["monday", "tuesday", "wednesday", "thursday", "friday",
                                                   "saturday", "sunday"]},
        "created_by_id": author.id, "created_by_name": author.username,
        "allow_user_autostart": True, "allow_user_autostop": t.allow_user_autostop,
        "allow_user_cancel_workspace_jobs": t.allow_user_cancel_workspace_jobs,
        "failure_ttl_ms": 0, "time_til_dormant_ms": 0, "time_til_dormant_autodelete_ms": 0,
        "time_til_autostop_notify_ms": 0,
        "require_active_version": False, "max_port_share_level": "public", "cors_behavior": "simple",
        "use_classic_parameter_flow": True, "disable_module_cache": False, "agents_allowed": True,
    }


def _job_json(job, b: Backend, org_id: str, build_id: str | None = None, version_id: str | None = None) -> dict:
    data = {
        "id": job.id, "created_at": ts(job.created_at), "started_at": ts(job.started_at),
        "completed_at": ts(job.completed_at), "canceled_at": ts(job.canceled_at),
        "status": job.status, "error": job.error or None, "error_code": job.error_code or None,
        "worker_id": NIL_UUID if job.started_at else None, "file_id": NIL_UUID,
        "tags": {"owner": "", "scope": "organization"},
        "queue_position": 0, "queue_size": 0, "organization_id": org_id,
        "input": {"workspace_build_id": build_id} if build_id else {"template_version_id": version_id},
        "type": "workspace_build" if build_id else "template_version_import",
        "metadata": {"template_version_name": "", "template_id": NIL_UUID, "template_name": "",
                     "template_display_name": "", "template_icon": ""},
        "logs_overflowed": False, "available_workers": [],
    }
    return {k: v for k, v in data.items() if v is not None or k in ("started_at", "completed_at")}


def version_json(v: TemplateVersion, b: Backend) -> dict:
    t = b.templates[v.template_id]
    author = b.users[t.created_by]
    job = Job(id=v.id, created_at=v.created_at, status="succeeded", started_at=v.created_at,
              completed_at=v.created_at)
    return {
        "id": v.id, "template_id": t.id, "organization_id": t.organization_id, "name": v.name,
        "created_at": ts(v.created_at), "updated_at": ts(v.created_at), "message": "", "readme": "",
        "archived": False, "has_external_agent": False, "warnings": [],
        "job": _job_json(job, b, t.organization_id, version_id=v.id),
        "matched_provisioners": {"count": 1, "available": 1, "most_recently_seen": ts(b.now())},
        "created_by": {"id": author.id, "username": author.username, "name": author.name, "avatar_url": ""},
    }


def parameter_json(p: ParameterSpec) -> dict:
    data = {
        "name": p.name, "display_name": p.display_name, "description": p.description,
        "description_plaintext": p.description, "type": p.type, "form_type": p.form_type or "input",
        "mutable": p.mutable, "default_value": p.default_value, "icon": "",
        "options": [{"name": o["name"], "description": o.get("description", ""), "value": o["value"],
                     "icon": o.get("icon", "")} for o in p.options],
        "required": p.required, "ephemeral": p.ephemeral,
    }
    if p.validation_regex:
        data["validation_regex"] = p.validation_regex
        data["validation_error"] = p.validation_error
    if p.validation_min is not None:
        data["validation_min"] = p.validation_min
    if p.validation_max is not None:
        data["validation_max"] = p.validation_max
    return data


def preset_json(p: Preset) -> dict:
    # codersdk.Preset has no JSON tags: real Coder writes Go's field names.
    return {
        "ID": p.id, "Name": p.name, "Description": p.description, "Icon": p.icon, "Default": p.default,
        "DesiredPrebuildInstances": None,
        "Parameters": [{"Name": k, "Value": v} for k, v in p.parameters.items()],
    }


def app_status_json(s: AppStatus, ws: Workspace) -> dict:
    return {
        "id": s.id, "created_at": ts(s.created_at), "workspace_id": ws.id, "agent_id": s.agent_id,
        "app_id": s.app_id, "state": s.state, "message": s.message, "uri": s.uri, "icon": "",
        "needs_user_attention": False,
    }


def _app_json(app: App, agent: Agent, ws: Workspace | None, owner: User | None, statuses_sent: bool = True) -> dict:
    # ws None: an app of a template version's import (no workspace: no statuses, no subdomain name).
    statuses = [app_status_json(s, ws) for s in reversed(ws.statuses) if s.app_id == app.id] if ws else []
    # AgentAPI (claude-code module) listens on 3284 and answers /status; the runner on 4300, /health.
    base, health, title = (("http://localhost:4300", "/health", "Claude Code (fleet runner)") if app.slug == "fleet"
                           else ("http://localhost:3284", "/status", "Claude Code" if app.slug == "ccw" else app.slug))
    return {
        "id": app.id, "url": f"{base}/", "external": False, "slug": app.slug,
        "display_name": title, "icon": "/icon/claude.svg",
        "subdomain": app.subdomain,
        # omitempty, and only for subdomain apps; a slug app's name leaves the agent out (db2sdk.AppSubdomain)
        **({"subdomain_name": f"{app.slug}--{ws.name}--{owner.username}"} if app.subdomain and ws and owner else {}),
        "sharing_level": "owner",
        "healthcheck": {"url": base + health, "interval": 3, "threshold": 20},
        "health": app.health, "hidden": False, "open_in": "slim-window",
        **({"statuses": statuses} if statuses_sent else {}),
    }


def _agent_json(agent: Agent, ws: Workspace | None, b: Backend) -> dict:
    owner = b.users[ws.owner_id] if ws else None
    healthy = agent.status == "connected" and agent.lifecycle_state not in ("start_error", "start_timeout")
    reason = {"connecting": "agent has not yet connected", "disconnected": "agent has lost connection",
              "timeout": "agent is taking too long to connect"}.get(agent.status, "")
    if agent.lifecycle_state == "start_error":
        reason = "agent startup script exited with an error"
    return {
        "id": agent.id, "parent_id": None, "created_at": ts(agent.created_at), "updated_at": ts(b.now()),
        "first_connected_at": ts(agent.first_connected_at), "last_connected_at": ts(agent.last_connected_at),
        "disconnected_at": ts(agent.disconnected_at), "started_at": ts(agent.started_at),
        "ready_at": ts(agent.ready_at), "status": agent.status, "lifecycle_state": agent.lifecycle_state,
        "name": agent.name, "resource_id": agent.resource_id, "instance_id": "", "architecture": "amd64",
        "environment_variables": {}, "operating_system": "linux", "logs_length": 0, "logs_overflowed": False,
        "directory": "", "expanded_directory": "/home/coder", "version": b.version, "api_version": "2.6",
        "apps": [_app_json(app, agent, ws, owner, b.app_statuses_in_answers) for app in agent.apps],
        "latency": {}, "connection_timeout_seconds": 120,
        "troubleshooting_url": "https://coder.com/docs/admin/templates/troubleshooting",
        "subsystems": [], "health": {"healthy": healthy, **({"reason": reason} if reason else {})},
        "display_apps": ["web_terminal", "port_forwarding_helper"], "log_sources": [], "scripts": [],
        "startup_script_behavior": "non-blocking",
    }


def version_resources_json(v: TemplateVersion, b: Backend) -> list[dict]:
    """What a version's import provisioned (GET /templateversions/{id}/resources): one container whose
    agent `main` declares the version's apps. The agent never connects (Coder's rule: `timeout` once its
    connection timeout has passed since the import); ids are stable, as rows in Coder's database are."""
    def stable(*parts: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join((v.id, *parts))))

    resource_id = stable("resource")
    waited = (b.now() - v.created_at).total_seconds()
    agent = Agent(id=stable("agent"), resource_id=resource_id, name="main", created_at=v.created_at,
                  apps=[App(id=stable("app", slug), slug=slug, subdomain=slug in v.subdomain_apps)
                        for slug in v.apps],
                  status="timeout" if waited > 120 else "connecting")
    return [{
        "id": resource_id, "created_at": ts(v.created_at), "job_id": v.id, "workspace_transition": "start",
        "type": "docker_container", "name": "workspace", "hide": False, "icon": "", "daily_cost": 0,
        "metadata": [], "agents": [_agent_json(agent, None, b)],
    }]


def build_json(build: Build, ws: Workspace, b: Backend) -> dict:
    owner = b.users[ws.owner_id]
    initiator = b.users[build.initiator_id]
    version = b.versions[build.template_version_id]
    resources = []
    if build.job.status == "succeeded" and build.transition != "delete":
        resources.append({
            "id": build.resource_id, "created_at": ts(build.job.completed_at), "job_id": build.job.id,
            "workspace_transition": build.transition, "type": "docker_container", "name": "workspace",
            "hide": False, "icon": "", "daily_cost": 0, "metadata": [],
            "agents": [_agent_json(a, ws, b) for a in build.agents],
        })
    return {
        "id": build.id, "created_at": ts(build.created_at),
        "updated_at": ts(build.job.completed_at or build.created_at),
        "workspace_id": ws.id, "workspace_name": ws.name, "workspace_owner_id": owner.id,
        "workspace_owner_name": owner.username, "workspace_owner_avatar_url": "",
        "template_version_id": version.id, "template_version_name": version.name,
        "build_number": build.build_number, "transition": build.transition,
        "initiator_id": initiator.id, "initiator_name": initiator.username,
        "job": _job_json(build.job, b, ws.organization_id, build_id=build.id),
        "reason": build.reason, "resources": resources, "deadline": ts(build.deadline),
        "max_deadline": ts(build.max_deadline),
        "status": build.status, "daily_cost": 0,
        "matched_provisioners": {"count": 1, "available": 1, "most_recently_seen": ts(b.now())},
        "template_version_preset_id": build.preset_id, "has_ai_task": False,
        "has_external_agent": False,
    }


def workspace_json(ws: Workspace, b: Backend) -> dict:
    owner = b.users[ws.owner_id]
    org = b.orgs[ws.organization_id]
    t = b.templates[ws.template_id]
    latest = ws.latest_build
    failing = [a.id for a in latest.agents if a.status != "connected" or a.lifecycle_state == "start_error"]
    newest = ws.statuses[-1] if ws.statuses else None
    return {
        "id": ws.id, "created_at": ts(ws.created_at), "updated_at": ts(ws.updated_at),
        "owner_id": owner.id, "owner_name": owner.username, "owner_avatar_url": "",
        "organization_id": org.id, "organization_name": org.name,
        "template_id": t.id, "template_name": t.name, "template_display_name": t.display_name,
        "template_icon": t.icon, "template_allow_user_cancel_workspace_jobs": t.allow_user_cancel_workspace_jobs,
        "template_active_version_id": t.active_version_id, "template_require_active_version": False,
        "template_use_classic_parameter_flow": True,
        "latest_build": build_json(latest, ws, b),
        **({"latest_app_status": app_status_json(newest, ws) if newest else None} if b.app_statuses_in_answers else {}),
        "outdated": latest.template_version_id != t.active_version_id,
        "name": ws.name, "autostart_schedule": None, "ttl_ms": effective_ttl_ms(ws, t),
        "last_used_at": ts(ws.last_used_at or ws.created_at), "deleting_at": None, "dormant_at": None,
        "health": {"healthy": not failing, "failing_agents": failing},
        "automatic_updates": "never", "allow_renames": False, "favorite": False, "next_start_at": None,
        "is_prebuild": False, "task_id": None, "shared_with": [],
    }
