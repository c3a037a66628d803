"""`fleet-mcp doctor`: is this Coder ready for a fleet, and which templates can run one?

It checks that Coder answers at CODER_URL, which version it runs and whose the
token is (the same one-line failures as the server's start-up, exit 2); then
every template. A template is a fleet project when its active version
declares `fleet_mcp_managed`; a project is complete when that version declares
all five fleet parameters, offers the roles `coder`, `operator` and `manager`
(as presets, or, without role presets, as options of `fleet_mcp_role`), gives
the marker the default "false", and gives its agent an app the fleet can drive:
the runner's (`runner_app_slug`, default `fleet`) or AgentAPI's
(`agentapi_app_slug`, default `ccw`): templates/fleet-agent pushed with the
variable `driver` = `runner` or `agentapi`.
The report names each project's driver; a runner project without the optional
model and budget parameters is complete with a warning (create_agent refuses
model and budgets for it). Exit 0 when at least one project is complete, 1 when
none is.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

import httpx

from .coder import errors as ce
from .coder.client import CoderClient
from .coder.schemas import Preset, RichParameter, Template, WorkspaceResource
from .drivers.keys import SECRET_SETTING
from .fleet.projects import roles_from
from .fleet.rules import FLEET_PARAMETERS, FLEET_QUERY, MANAGED, ROLE, RUNNER_KEY, RUNNER_PARAMETERS
from .serving.preflight import StartupError, check_coder, load_settings
from .settings import Settings

T = TypeVar("T")

__all__ = ["ROLES", "ProjectCheck", "Report", "diagnose", "main", "run"]

ROLES = ("coder", "operator", "manager")
EMULATOR_URL = "http://emulator.local"
_OK, _FAIL, _OTHER, _WARN = "ok  ", "FAIL", "--  ", "warn"
RUNNER, AGENTAPI = "runner", "AgentAPI"


@dataclass
class ProjectCheck:
    """One fleet project: what it lacks (empty when complete), how it offers roles, which driver runs its
    agents (`runner`, `AgentAPI`, or "" when its agent has neither app) and what works less well (`warnings`)."""

    name: str
    display_name: str = ""
    lacks: list[str] = field(default_factory=list)
    roles: str = ""
    driver: str = ""
    app: str = ""
    subdomain: bool = False  # the app is declared `subdomain = true`
    reach: str = ""  # how the fleet reaches the app here: "path" or "subdomain"
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.lacks

    @property
    def title(self) -> str:
        shown = self.display_name if self.display_name and self.display_name != self.name else ""
        return f'{self.name} "{shown}"' if shown else self.name


@dataclass
class Report:
    url: str
    version: str
    username: str
    user_roles: list[str]
    runner_slug: str
    agentapi_slug: str
    projects: list[ProjectCheck]
    others: list[ProjectCheck]  # templates that are not fleet projects
    where: str = ""
    wildcard: str = ""  # Coder's wildcard app host, "" when it has none
    path_apps: bool = True  # whether Coder serves path apps (no --disable-path-apps)
    app_statuses: bool | None = None  # whether workspace answers carry app statuses (None: no workspace to tell)
    app_host_problem: str | None = None  # why an app host under the wildcard does not reach Coder
    runner_secret: bool = False  # FLEET_MCP_RUNNER_SECRET is set

    @property
    def complete(self) -> list[ProjectCheck]:
        return [p for p in self.projects if p.complete]

    @property
    def exit_code(self) -> int:
        return 0 if self.complete else 1

    def lines(self) -> list[str]:
        where = f" ({self.where})" if self.where else ""
        roles = ", ".join(self.user_roles) or "member, no site roles"
        out = ["Coder", f"  {_OK} reachable at {self.url}{where}", f"  {_OK} version {self.version}",
               f"  {_OK} token valid: {self.username} (roles: {roles})", self._apps_line(),
               *([] if self.app_statuses is not False else [
                   f"  {_WARN} workspace answers carry no app statuses (a slimmer answer than the fleet reads): "
                   "list_agents cannot tell busy from idle and shows such agents as unknown; show_agent asks "
                   "each agent itself"]),
               f"Fleet projects (templates whose active version declares {MANAGED})"]
        if not self.projects:
            out.append(f"  {_FAIL} none: no template declares {MANAGED} (templates/fleet-agent is one that does)")
        for p in self.projects:
            how = f", by {p.reach}" if p.reach else ""
            shown = "; ".join(x for x in (f"{p.driver} (app {p.app!r}{how})" if p.driver else "", p.roles) if x)
            if p.complete:
                out.append(f"  {_OK} {p.title}: complete" + (f"; {shown}" if shown else ""))
            else:
                out.append(f"  {_FAIL} {p.title}: incomplete" + (f"; {shown}" if shown else ""))
                out += [f"         - {lack}" for lack in p.lacks]
            out += [f"         ! {warning}" for warning in p.warnings]
        if any(p.driver == RUNNER for p in self.projects):
            out.append(self._runner_key_line())
        if self.others:
            out.append("Other templates")
            out += [f"  {_OTHER} {p.title}: not a fleet project" for p in self.others]
        done = len(self.complete)
        out.append(f"{done} of {len(self.projects)} fleet project{'s' if len(self.projects) != 1 else ''} complete"
                   + ("." if done else f": the fleet cannot create an agent (apps looked for: runner "
                                       f"{self.runner_slug!r}, AgentAPI {self.agentapi_slug!r})."))
        return out

    def _runner_key_line(self) -> str:
        if self.runner_secret:
            return (f"  {_OK} runner keys: derived from {SECRET_SETTING}; Coder holds only a nonce and the runner's "
                    "verifier")
        return (f"  {_WARN} runner keys: {SECRET_SETTING} is unset, so each runner's key is a build parameter, "
                "which the agent itself can read (with its workspace's Coder agent token) and then answer its own "
                "permission prompts; set it (the same on every replica)")

    def _apps_line(self) -> str:
        sub = f"subdomain form at {self.wildcard}" if self.wildcard else "no wildcard app host (no subdomain form)"
        if self.wildcard and self.app_host_problem:
            mark = _WARN if self.path_apps else _FAIL
            return (f"  {mark} apps: path form {'allowed' if self.path_apps else 'disabled'}; {sub}, but its hosts "
                    f"do not reach Coder ({self.app_host_problem}): fix the wildcard DNS, or set "
                    f"FLEET_MCP_CONNECT_TO='{self.wildcard.split(':')[0]}=ADDRESS:PORT' (Coder's address)")
        if self.path_apps:
            return f"  {_OK} apps: path form allowed; {sub}"
        if self.wildcard:
            return f"  {_OK} apps: path apps disabled (--disable-path-apps); {sub}"
        return f"  {_FAIL} apps: path apps disabled and no wildcard app host: no agent's app can be reached"


async def diagnose(client: CoderClient, settings: Settings, where: str = "") -> Report:
    """Read Coder through `client` and judge every template; Coder's own errors propagate."""
    info, me, templates, wildcard = await asyncio.gather(client.buildinfo(), client.me(), client.templates(),
                                                         client.app_host())
    slugs = {RUNNER: settings.runner_app_slug, AGENTAPI: settings.agentapi_app_slug}
    checks, refused, sample, unreachable = await asyncio.gather(
        asyncio.gather(*(_check(client, t, slugs) for t in templates)), client.path_apps_refused(),
        client.workspaces(FLEET_QUERY, limit=1),
        client.app_host_unreachable(me.username) if wildcard else asyncio.sleep(0, None))
    projects = [c for c, fleet in checks if fleet]
    for check in projects:
        _reach(check, unreachable if wildcard else "Coder reports no wildcard app host", not refused)
    return Report(url=settings.coder_url, version=info.version or "unknown", username=me.username,
                  user_roles=[r.name for r in me.roles], runner_slug=slugs[RUNNER], agentapi_slug=slugs[AGENTAPI],
                  where=where, wildcard=wildcard, path_apps=not refused, app_host_problem=unreachable,
                  app_statuses=sample.workspaces[0].sends_app_statuses if sample.workspaces else None,
                  projects=projects, others=[c for c, fleet in checks if not fleet],
                  runner_secret=settings.runner_secret is not None)


def _reach(check: ProjectCheck, no_subdomain: str | None, path_apps: bool) -> None:
    """How the fleet reaches the project's app on this deployment (as `coder.apps` decides), or why it cannot;
    `no_subdomain`: why app hosts cannot be used (None: they can)."""
    if not check.driver:
        return
    if no_subdomain is None and (check.subdomain or not path_apps):
        check.reach = "subdomain"
    elif path_apps:
        check.reach = "path"
        if check.subdomain:
            check.warnings.append(f"app {check.app!r} is declared subdomain = true, but {no_subdomain}: the fleet "
                                  "reaches it by path")
    else:
        check.lacks.append(f"a way to reach app {check.app!r}: Coder refuses path apps, and {no_subdomain}")


async def _check(client: CoderClient, t: Template, slugs: dict[str, str]) -> tuple[ProjectCheck, bool]:
    """(the check, whether the template is a fleet project)."""
    check = ProjectCheck(t.name, t.display_name)
    version = t.active_version_id
    params = await _read(check, "parameters", client.rich_parameters(version))
    if params is None:
        return check, True  # cannot tell: shown with the failure rather than hidden among the others
    declared = {p.name: p for p in params}
    if MANAGED not in declared:
        return check, False
    for name in FLEET_PARAMETERS:
        if name not in declared:
            check.lacks.append(f"parameter {name} (Coder drops values of undeclared parameters; "
                               "list_agent_projects shows a template only with all five)")
    default = declared[MANAGED].default_value
    if default.strip().lower() != "false":
        check.lacks.append(f'{MANAGED} defaults to {default!r}, not "false": a person\'s own workspace '
                           "of this template would be taken for an agent")
    presets, resources = await asyncio.gather(_read(check, "presets", client.presets(version)),
                                              _read(check, "resources", client.template_version_resources(version)))
    if presets is not None:
        check.roles = _roles(check, params, presets)
    if resources is not None:
        _app(check, resources, slugs)
        _runner_parameters(check, declared)
    return check, True


async def _read(check: ProjectCheck, what: str, call: Awaitable[T]) -> T | None:
    try:
        return await call
    except ce.CoderError as exc:
        check.lacks.append(f"its active version's {what} could not be read: {exc}")
        return None


def _roles(check: ProjectCheck, params: list[RichParameter], presets: list[Preset]) -> str:
    """How the project offers roles (read as the fleet reads them, `roles_from`); records what is missing."""
    role = next((p for p in params if p.name == ROLE), None)
    options = [o.value for o in role.options] if role else []
    for preset in presets:
        for setting in preset.parameters:
            if setting.name == ROLE and options and setting.value not in options:
                check.lacks.append(f"preset {preset.name!r} sets {ROLE}={setting.value!r}, "
                                   "which is not among its options")
            elif setting.name in FLEET_PARAMETERS and setting.name != ROLE:
                check.lacks.append(f"preset {preset.name!r} sets {setting.name}: a preset's value overrides "
                                   "the one create_agent sends")
    choices = roles_from(params, presets)
    names = [c.role.name for c in choices]
    if any(c.preset_id is not None for c in choices):
        check.lacks += [f"preset for role {r} (one that sets {ROLE}={r})" for r in ROLES if r not in names]
        return "roles from presets: " + ", ".join(names)
    source = "no presets" if not presets else f"no preset sets {ROLE}"
    if role is None:
        return f"{source}, and no {ROLE} to take roles from"
    if not options:
        check.lacks.append(f"roles: {source} and {ROLE} has no options")
        return f"{source}: roles come from the {ROLE} options"
    check.lacks += [f"option {r} of {ROLE} ({source}: roles come from its options)" for r in ROLES
                    if r not in options]
    return f"{source}: roles from the {ROLE} options: " + ", ".join(options)


def _app(check: ProjectCheck, resources: list[WorkspaceResource], slugs: dict[str, str]) -> None:
    """The driver, picked as the fleet picks it: the runner's app first, then AgentAPI's."""
    agents = [agent for resource in resources for agent in resource.agents or ()]
    found = sorted({app.slug for agent in agents for app in agent.apps})
    wanted = f"the runner app {slugs[RUNNER]!r} or the AgentAPI app {slugs[AGENTAPI]!r}"
    if not agents:
        check.lacks.append(f"an agent with {wanted}: the version declares no agent")
        return
    driver = next((kind for kind, slug in slugs.items() if slug in found), None)
    if driver is None:
        check.lacks.append(f"{wanted} on its agent (apps: {', '.join(found) or 'none'}); templates/fleet-agent "
                           "with driver=runner declares the runner's, with driver=agentapi the "
                           "claude-code module 4.x adds AgentAPI's; FLEET_MCP_RUNNER_APP_SLUG / FLEET_MCP_APP_SLUG "
                           "name others")
        return
    check.driver, check.app = driver, slugs[driver]
    check.subdomain = any(app.subdomain for agent in agents for app in agent.apps if app.slug == check.app)


def _runner_parameters(check: ProjectCheck, declared: dict[str, RichParameter]) -> None:
    """Model and budgets reach the runner through three optional parameters; say what their absence costs."""
    missing = [name for name in RUNNER_PARAMETERS if name not in declared]
    if check.driver == RUNNER and RUNNER_KEY not in declared:
        check.lacks.append(f"parameter {RUNNER_KEY} (the runner's key, made by create_agent: without it the "
                           "runner refuses every call of the fleet; templates/fleet-agent declares it with "
                           "driver=runner)")
    if check.driver == RUNNER and missing:
        check.warnings.append(f"declares no {', '.join(missing)}: create_agent will refuse model, max_turns and "
                              "max_cost_usd for this project (templates/fleet-agent declares all three with "
                              "driver=runner)")
    elif check.driver == AGENTAPI and len(missing) < len(RUNNER_PARAMETERS):
        check.warnings.append("declares the runner's model and budget parameters, but its agent runs AgentAPI, "
                              "which cannot apply them: create_agent would accept model and budgets that do nothing")


async def run(settings: Settings, transport: httpx.AsyncBaseTransport | None = None, *, where: str = "",
              out: TextIO | None = None) -> int:
    """Check start-up as the server does (raises `StartupError`), then print the report; the exit code."""
    if settings.coder_session_token is None:
        raise StartupError("doctor reads templates as a Coder user: set CODER_SESSION_TOKEN (any user's token from "
                           "`coder tokens create`), even where the server runs with FLEET_MCP_AUTH=coder")
    await check_coder(settings, transport)
    quick = settings.model_copy(update={"retry_budget_s": 0.0})
    async with quick.coder_client(transport) as client:
        try:
            report = await diagnose(client, settings, where)
        except ce.CoderError as exc:
            raise StartupError(f"Coder at CODER_URL={settings.coder_url} failed while listing templates: "
                               f"{exc}") from None
    print("\n".join(report.lines()), file=out or sys.stdout, flush=True)
    return report.exit_code


def main(emulator: bool = False, runtime: str = "agentapi") -> int:
    """`fleet-mcp doctor [--emulator [--agent-runtime R]]`: 0 a project is complete, 1 none is, 2 Coder cannot be
    used."""
    transport = None
    try:
        if emulator:
            from .emulator import Emulator

            coder = Emulator(agent_runtime=runtime)  # only its templates are read: no agent process starts
            transport = httpx.ASGITransport(app=coder.app)
            settings = load_settings(coder_url=EMULATOR_URL, coder_session_token=coder.token)
        else:
            settings = load_settings()
        return asyncio.run(run(settings, transport, where="the embedded emulator" if emulator else ""))
    except StartupError as exc:
        print(f"fleet-mcp: {exc}", file=sys.stderr)
        return 2
