"""The emulated Coder: in-memory state and Coder's rules, no HTTP.

Routes call these methods with parsed input and serialize what they return;
every refusal is an `ErrorAnswer` carrying Coder's status code and wording.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import Counter, defaultdict, deque
from datetime import datetime

from ..clock import Clock
from .errors import ErrorAnswer, invalid_uuid, not_found
from .lifecycle import Lifecycle, Timings
from .schedule import Schedule, valid_ttl
from .search import parse_templates_query, parse_workspaces_query
from .state import Build, Job, Organization, Preset, Template, TemplateVersion, User, Workspace, new_id

__all__ = ["Backend", "NAME_RE"]

NAME_RE = re.compile(r"^[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*\Z")
RATE_LIMIT = 512
RATE_WINDOW = 60.0
TRANSITIONS = ("start", "stop", "delete")


def parse_uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise invalid_uuid(value) from None


class Backend:
    """All of the emulated deployment's state and the rules that guard it."""

    def __init__(self, *, clock: Clock | None = None, timings: Timings | None = None,
                 version: str = "v2.37.0+emulator") -> None:
        self.clock = clock or Clock()
        # Its own copy: the control API changes it, and REAL_TIME is shared by every emulator of a process.
        self.timings = dataclasses.replace(timings) if timings else Timings()
        self.version = version
        self.lifecycle = Lifecycle(self.clock, self.timings)
        self.schedule = Schedule(self)
        self.rate_limit = False
        self.wildcard_hostname = ""
        self.disable_path_apps = False  # Coder's --disable-path-apps
        self.app_statuses_in_answers = True  # False: a slimmer Coder whose workspace answers leave app statuses out
        self.time_per_request = 0.0
        self.requests: Counter[str] = Counter()
        self.reset()

    def reset(self) -> None:
        """Forget everything: no users, templates or workspaces; timers dropped."""
        self.clock.clear()
        self.users: dict[str, User] = {}
        self.orgs: dict[str, Organization] = {}
        self.templates: dict[str, Template] = {}
        self.versions: dict[str, TemplateVersion] = {}
        self.workspaces: dict[str, Workspace] = {}
        self.builds: dict[str, Build] = {}
        self.deployment_id = new_id()
        self.sessions: dict[str, object] = {}  # workspace id -> AgentAPI session (claude.Session)
        self._hits: dict[tuple[str, str], deque[float]] = defaultdict(deque)

    def count(self, route: str) -> None:
        """Count one request to a route pattern (read back through the control API)."""
        self.requests[route] += 1

    def settle(self) -> None:
        """Let every timer that is due fire (builds progress, agents connect...)."""
        self.clock.run_due()

    def on_request(self) -> None:
        """Each request lets `time_per_request` seconds pass on a virtual clock, then settles.

        With it, a client that polls sees time move as it polls, and tests of
        waiting code need no sleeps and no threads.
        """
        if self.time_per_request and self.clock.virtual:
            self.clock.advance(self.time_per_request)
        self.settle()

    def now(self) -> datetime:
        return self.clock.now()

    def app_activity(self, ws: Workspace, previous: str | None, state: str) -> None:
        """An app status was recorded (`previous` is the app's state before it, None for its first)."""
        self.schedule.app_activity(ws, previous, state)

    # --- identity -----------------------------------------------------------

    def authenticate(self, token: str | None) -> User:
        if token:
            for user in self.users.values():
                if token in user.tokens:
                    return user
        raise ErrorAnswer(401, "You are signed out or your session has expired. Please sign in again to continue.",
                         "An API key or session token is required." if not token else "API key is invalid or expired.")

    def check_rate(self, user: User, path: str) -> None:
        """Coder's per-user, per-endpoint limit (512 a minute), when switched on."""
        if not self.rate_limit:
            return
        hits = self._hits[(user.id, path)]
        now = self.clock.elapsed()
        while hits and hits[0] <= now - RATE_WINDOW:
            hits.popleft()
        if len(hits) >= RATE_LIMIT:
            retry = max(1, int(hits[0] + RATE_WINDOW - now + 0.999))
            raise ErrorAnswer(429, f"You've been rate limited for sending more than {RATE_LIMIT} requests in 1m0s.",
                             headers={"Retry-After": str(retry)})
        hits.append(now)

    def is_owner(self, user: User) -> bool:
        return "owner" in user.roles

    def user(self, actor: User, ref: str) -> User:
        if ref == "me":
            return actor
        for user in self.users.values():
            if ref in (user.id, user.username):
                return user
        raise ErrorAnswer(400, '"user" must be an existing uuid or username.', f'queried user="{ref}"')

    def organization(self, ref: str) -> Organization:
        for org in self.orgs.values():
            if ref in (org.id, org.name) or (ref == "default" and org.is_default):
                return org
        raise not_found()

    def default_org(self) -> Organization:
        return next(o for o in self.orgs.values() if o.is_default)

    # --- templates ----------------------------------------------------------

    def list_templates(self, actor: User, q: str = "", org: Organization | None = None) -> list[Template]:
        f = parse_templates_query(q)
        found = []
        for t in sorted(self.templates.values(), key=lambda t: t.name):
            if org and t.organization_id != org.id:
                continue
            if f.organization and f.organization not in (t.organization_id, self.orgs[t.organization_id].name):
                continue
            if f.exact_name and t.name.lower() != f.exact_name:
                continue
            if f.fuzzy_name and f.fuzzy_name not in t.name.lower():
                continue
            if f.exact_display_name and t.display_name.lower() != f.exact_display_name:
                continue
            if f.fuzzy_display_name and f.fuzzy_display_name not in t.display_name.lower():
                continue
            if f.ids and t.id not in f.ids:
                continue
            if f.deprecated is not None and t.deprecated != f.deprecated:
                continue
            author = self.users[t.created_by].username
            if f.author and f.author not in ("me" if t.created_by == actor.id else "", author):
                continue
            found.append(t)
        return found

    def template(self, template_id: str) -> Template:
        t = self.templates.get(parse_uuid(template_id))
        if not t:
            raise not_found()
        return t

    def template_by_name(self, org_ref: str, name: str) -> Template:
        org = self.organization(org_ref)
        for t in self.templates.values():
            if t.organization_id == org.id and t.name == name:
                return t
        raise not_found()

    def template_version(self, version_id: str) -> TemplateVersion:
        v = self.versions.get(parse_uuid(version_id))
        if not v:
            raise not_found()
        return v

    # --- workspaces ---------------------------------------------------------

    def _visible(self, actor: User, ws: Workspace) -> bool:
        return ws.owner_id == actor.id or self.is_owner(actor)

    def workspace(self, actor: User, workspace_id: str, include_deleted: bool = False) -> Workspace:
        ws = self.workspaces.get(parse_uuid(workspace_id))
        if not ws or not self._visible(actor, ws):
            raise not_found()
        if ws.deleted and not include_deleted:
            raise ErrorAnswer(410, f'Workspace "{ws.id}" was deleted, you can view this workspace by specifying '
                             "'?include_deleted=true' and trying again.")
        return ws

    def workspace_by_name(self, actor: User, owner_ref: str, name: str, include_deleted: bool = False) -> Workspace:
        owner = self.user(actor, owner_ref)
        matches = [w for w in self.workspaces.values()
                   if w.owner_id == owner.id and w.name.lower() == name.lower() and (include_deleted or not w.deleted)]
        if not matches or not self._visible(actor, matches[-1]):
            raise not_found()
        return matches[-1]

    def list_workspaces(self, actor: User, q: str, limit: int, offset: int) -> tuple[list[Workspace], int]:
        f = parse_workspaces_query(q)
        owner_id = None
        if f.owner:
            owner_id = actor.id if f.owner == "me" else next(
                (u.id for u in self.users.values() if u.username.lower() == f.owner), "none")
        found = []
        for ws in sorted(self.workspaces.values(), key=self._list_order):
            if ws.deleted or not self._visible(actor, ws):
                continue
            if owner_id and ws.owner_id != owner_id:
                continue
            if f.name and f.name not in ws.name.lower():
                continue
            template = self.templates[ws.template_id]
            if f.template and template.name.lower() != f.template:
                continue
            if f.organization and f.organization not in (ws.organization_id, self.orgs[ws.organization_id].name):
                continue
            build = ws.latest_build
            if f.status and build.status != f.status:
                continue
            if f.ids and ws.id not in f.ids:
                continue
            if f.has_agent and not (build.transition == "start" and any(
                    a.status in f.has_agent for a in build.agents)):
                continue
            if f.outdated is not None and (build.template_version_id != template.active_version_id) != f.outdated:
                continue
            if (f.has_param or f.param_values) and not self._params_match(build, f.has_param, f.param_values):
                continue
            found.append(ws)
        page = found[offset:offset + limit] if limit else found[offset:]
        return page, len(found)

    def _list_order(self, ws: Workspace) -> tuple:
        """Coder's order: workspaces up and running first, then by owner, then by name."""
        build = ws.latest_build
        up = build.transition == "start" and build.job.status == "succeeded"
        return (not up, self.users[ws.owner_id].username.lower(), ws.name.lower())

    @staticmethod
    def _params_match(build: Build, names: list[str], pairs: list[tuple[str, str]]) -> bool:
        # Several param terms are OR-ed, as in Coder's SQL.
        for name, value in build.parameters:
            if name.lower() in names or (name.lower(), value.lower()) in pairs:
                return True
        return False

    def create_workspace(self, actor: User, owner_ref: str, body: dict, org: Organization | None = None) -> Workspace:
        owner = self.user(actor, owner_ref)
        if owner.id != actor.id and not self.is_owner(actor):
            raise ErrorAnswer(403, "Unauthorized to create workspace.",
                             "You are unable to create a workspace in this organization. It is possible to have "
                             "access to the template, but not be able to create a workspace.")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ErrorAnswer(400, "Validation failed.", validations=[
                {"field": "name", "detail": "Validation failed for tag \"required\" with value: \"\""}])
        if len(name) > 32 or not NAME_RE.match(name) or name.lower() in ("new", "create"):
            raise ErrorAnswer(400, "Validation failed.", validations=[
                {"field": "name", "detail": f'Validation failed for tag "workspace_name" with value: "{name}"'}])
        template_id, version_id = body.get("template_id") or "", body.get("template_version_id") or ""
        if bool(template_id) == bool(version_id):
            raise ErrorAnswer(400, "Validation failed.", validations=[
                {"field": "template_id", "detail": "Validation failed for tag \"required_without\" with value: \"\""}
                if not template_id else
                {"field": "template_id", "detail": "Validation failed for tag \"excluded_with\" with value: "
                 f'"{template_id}"'}])
        if version_id:
            version = self.versions.get(parse_uuid(version_id))
            if not version:
                raise ErrorAnswer(400, f'Template version "{version_id}" doesn\'t exist.',
                                 validations=[{"field": "template_version_id", "detail": "template not found"}])
            template = self.templates[version.template_id]
        else:
            found = self.templates.get(parse_uuid(template_id))
            if not found:
                raise ErrorAnswer(400, f'Template "{template_id}" doesn\'t exist.',
                                 validations=[{"field": "template_id", "detail": "template not found"}])
            template = found
            version = self.versions[template.active_version_id]
        if org and template.organization_id != org.id:
            raise ErrorAnswer(400, f'Template "{template.id}" doesn\'t exist.',
                             validations=[{"field": "template_id", "detail": "template not found"}])
        if template.deprecated:
            raise ErrorAnswer(403, f'Template "{template.name}" has been deprecated, and cannot be used to '
                             "create a new workspace.")
        if any(w.owner_id == owner.id and w.name.lower() == name.lower() and not w.deleted
               for w in self.workspaces.values()):
            raise ErrorAnswer(409, f'Workspace "{name}" already exists.', validations=[
                {"field": "name", "detail": "This value is already in use and should be unique."}])
        # Coder takes a TTL even from a template that disallows it; builds then use the template's.
        ttl = valid_ttl(body.get("ttl_ms"), template.default_ttl_ms, "Invalid Workspace Time to Shutdown.",
                        "CreateWorkspaceRequest")
        preset = self._preset(version, body.get("template_version_preset_id"))
        params = self._resolve(version, {}, body.get("rich_parameter_values") or [], preset, first=True)
        now = self.now()
        ws = Workspace(id=new_id(), name=name, owner_id=owner.id, organization_id=template.organization_id,
                       template_id=template.id, created_at=now, updated_at=now, last_used_at=now, ttl_ms=ttl)
        self.workspaces[ws.id] = ws
        self._queue(ws, actor, "start", version, params, preset, reason="initiator")
        return ws

    # --- builds -------------------------------------------------------------

    def create_build(self, actor: User, workspace_id: str, body: dict) -> Build:
        ws = self.workspaces.get(parse_uuid(workspace_id))
        if not ws or not self._visible(actor, ws):
            raise not_found()
        transition = body.get("transition")
        if transition not in TRANSITIONS:
            raise ErrorAnswer(400, "Validation failed.", validations=[
                {"field": "transition", "detail": f'Validation failed for tag "oneof" with value: "{transition}"'}])
        if ws.deleted and transition != "delete":
            raise ErrorAnswer(409, f"Cannot {transition} a deleted workspace!",
                             "This workspace has been deleted and cannot be modified.")
        if body.get("orphan") and transition != "delete":
            raise ErrorAnswer(400, "Orphan is only permitted when deleting a workspace.")
        if ws.latest_build.job.status in ("pending", "running", "canceling"):
            raise ErrorAnswer(409, "A workspace build is already active.")
        template = self.templates[ws.template_id]
        version_id = body.get("template_version_id") or ws.latest_build.template_version_id
        version = self.versions.get(parse_uuid(version_id))
        if not version or version.template_id != template.id:
            raise ErrorAnswer(400, f'Template version "{version_id}" doesn\'t exist.',
                             validations=[{"field": "template_version_id", "detail": "template not found"}])
        preset = self._preset(version, body.get("template_version_preset_id") or ws.latest_build.preset_id)
        previous = dict(ws.latest_build.parameters)
        params = self._resolve(version, previous, body.get("rich_parameter_values") or [], preset, first=False)
        build = self._queue(ws, actor, transition, version, params, preset, reason=body.get("reason") or "initiator")
        if body.get("orphan") and transition == "delete":
            build.job.status = "succeeded"
            build.job.started_at = build.job.completed_at = self.now()
            ws.deleted = True
        return build

    def _queue(self, ws: Workspace, actor: User, transition: str, version: TemplateVersion,
               params: list[tuple[str, str]], preset: Preset | None, reason: str) -> Build:
        now = self.now()
        build = Build(id=new_id(), workspace_id=ws.id, build_number=len(ws.builds) + 1, transition=transition,
                      template_version_id=version.id, initiator_id=actor.id, reason=reason,
                      job=Job(id=new_id(), created_at=now), created_at=now, parameters=params,
                      preset_id=preset.id if preset else None)
        ws.builds.append(build)
        ws.updated_at = now
        self.builds[build.id] = build
        self.lifecycle.begin(ws, build, version)
        return build

    @staticmethod
    def _preset(version: TemplateVersion, preset_id: str | None) -> Preset | None:
        if not preset_id:
            return None
        for preset in version.presets:
            if preset.id == preset_id:
                return preset
        raise ErrorAnswer(400, "Invalid template version preset.",
                         f'preset "{preset_id}" not found for template version')

    @staticmethod
    def _resolve(version: TemplateVersion, previous: dict[str, str], given: list, preset: Preset | None,
                 first: bool) -> list[tuple[str, str]]:
        """Coder's classic parameter resolution: preset > given > previous > default.

        Only declared parameters are kept: anything else is dropped silently.
        """
        supplied: dict[str, str] = {}
        for item in given:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                supplied[item["name"]] = str(item.get("value", ""))
        resolved = []
        for spec in version.parameters:
            fail = f'Unable to validate parameter "{spec.name}"'
            prev = previous.get(spec.name)
            if preset and spec.name in preset.parameters:
                value = preset.parameters[spec.name]
            elif spec.name in supplied:
                value = supplied[spec.name]
                if not first and not spec.mutable and prev is not None and value != prev:
                    raise ErrorAnswer(400, fail, f'Parameter "{spec.name}" is not mutable, so it can\'t be updated '
                                     "after creating a workspace.")
            elif prev is not None and not spec.ephemeral:
                value = prev
            elif spec.required:
                raise ErrorAnswer(400, fail, f'Parameter "{spec.name}" is required but not provided')
            else:
                value = spec.default_value
            if value == "" and not spec.required:
                value = spec.default_value
            if spec.options and value not in [o["value"] for o in spec.options]:
                values = ", ".join(f'"{o["value"]}"' for o in spec.options)
                raise ErrorAnswer(400, fail, f"can't validate build parameter \"{spec.name}\": "
                                 f"parameter value must match one of options: [{values}]")
            if spec.validation_regex and spec.type == "string" and not re.search(spec.validation_regex, value):
                raise ErrorAnswer(400, fail, spec.validation_error or
                                 f'value "{value}" does not match "{spec.validation_regex}"')
            resolved.append((spec.name, value))
        return resolved

    def list_builds(self, actor: User, workspace_id: str) -> list[Build]:
        ws = self.workspace(actor, workspace_id, include_deleted=True)
        return list(reversed(ws.builds))

    def build(self, actor: User, build_id: str) -> tuple[Workspace, Build]:
        build = self.builds.get(parse_uuid(build_id))
        if not build:
            raise not_found()
        ws = self.workspaces[build.workspace_id]
        if not self._visible(actor, ws):
            raise not_found()
        return ws, build

    def cancel_build(self, actor: User, build_id: str, expect_status: str = "") -> None:
        if expect_status and expect_status not in ("running", "pending"):
            raise ErrorAnswer(400, f'Invalid expect_status "{expect_status}". Only \'running\' or \'pending\' '
                             "are allowed.")
        ws, build = self.build(actor, build_id)
        template = self.templates[ws.template_id]
        if not template.allow_user_cancel_workspace_jobs and not self.is_owner(actor):
            raise ErrorAnswer(403, "User is not allowed to cancel workspace builds. Owner role is required.")
        job = build.job
        if job.status in ("succeeded", "failed", "canceled"):
            raise ErrorAnswer(400, "Job has already completed!")
        if job.status == "canceling":
            raise ErrorAnswer(400, "Job has already been marked as canceled!")
        if expect_status and job.status != expect_status:
            raise ErrorAnswer(412, "Job is not in the expected state.")
        self.lifecycle.cancel(build)

    def set_ttl(self, actor: User, workspace_id: str, body: dict) -> None:
        self.schedule.set_ttl(self.workspace(actor, workspace_id), body)

    def autostop(self, ws: Workspace) -> Build:
        """The lifecycle executor's stop build once a deadline passed: by the owner, reason `autostop`."""
        last = ws.latest_build
        preset = self._preset(self.versions[last.template_version_id], last.preset_id)
        return self._queue(ws, self.users[ws.owner_id], "stop", self.versions[last.template_version_id],
                           list(last.parameters), preset, reason="autostop")

    def version_of(self, build: Build) -> TemplateVersion:
        return self.versions[build.template_version_id]
