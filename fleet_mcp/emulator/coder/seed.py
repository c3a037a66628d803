"""Seeds: the demo deployment and bulk fleets, built through the backend's own rules."""

from __future__ import annotations

from .backend import Backend
from .state import Organization, ParameterSpec, Preset, Template, TemplateVersion, User, new_id

__all__ = ["ROLE_PROMPTS", "add_template", "bulk_fleet", "fleet_app", "fleet_parameters", "seed_demo", "seed_empty"]

SETTLE_S = 30  # long enough for every seeded workspace to be built and its agent up

ROLES = {
    "coder": ("Software Engineer", "Writes code, implements features, fixes bugs"),
    "operator": ("Operations Engineer", "Manages deployments, monitors systems, handles incidents"),
    "manager": ("Engineering Manager", "Coordinates work, reviews specs, verifies agent alignment"),
}
ROLE_PROMPTS = {role: f"You are {'an' if title[0] in 'AEIOU' else 'a'} {title}. {what}."
                for role, (title, what) in ROLES.items()}


def fleet_parameters(runner: bool = False) -> list[ParameterSpec]:
    """The five fleet parameters, as templates/fleet-agent declares them; `runner` adds what its runner driver
    declares: the optional model and budget parameters (empty: the runner's defaults) and the runner's key."""
    return [
        ParameterSpec("fleet_mcp_managed", type="bool", display_name="Fleet managed", default_value="false",
                      form_type="checkbox", description="Set to true only by fleet-mcp's create_agent."),
        ParameterSpec("fleet_mcp_role", display_name="Role", default_value="coder", form_type="dropdown",
                      options=[{"name": title, "value": role, "description": what}
                               for role, (title, what) in ROLES.items()]),
        ParameterSpec("fleet_mcp_project", display_name="Project", form_type="input",
                      validation_regex=r"^([A-Za-z0-9][A-Za-z0-9._-]{0,62})?$",
                      validation_error="letters, digits, . _ - (max 63) or empty"),
        ParameterSpec("fleet_mcp_agent_spec", display_name="Agent spec", form_type="textarea"),
        ParameterSpec("fleet_mcp_current_task", display_name="Current task", form_type="textarea"),
    ] + ([
        ParameterSpec("fleet_mcp_model", display_name="Model", form_type="input",
                      description="Claude model for this agent; empty: Claude Code's default."),
        ParameterSpec("fleet_mcp_max_turns", display_name="Max turns", form_type="input",
                      validation_regex=r"^([1-9][0-9]{0,5})?$", validation_error="a whole number from 1, or empty"),
        ParameterSpec("fleet_mcp_max_cost_usd", display_name="Max cost (USD)", form_type="input",
                      validation_regex=r"^([0-9]{1,6}(\.[0-9]{1,4})?)?$", validation_error="USD, e.g. 2.50, or empty"),
        ParameterSpec("fleet_mcp_result_schema", display_name="Result schema", form_type="textarea",
                      description="A JSON Schema the spec's answer must fit; empty: a plain answer."),
        ParameterSpec("fleet_mcp_runner_key", display_name="Runner key", form_type="input",
                      description="Set by fleet-mcp's create_agent; the runner is given only its SHA-256."),
    ] if runner else [])


def fleet_app(runtime: str) -> str:
    """The app slug fleet agents declare: `fleet` (the runner) or `ccw` (AgentAPI)."""
    return "fleet" if runtime == "runner" else "ccw"


def add_user(b: Backend, username: str, token: str, roles: list[str]) -> User:
    user = User(id=new_id(), username=username, email=f"{username}@example.com", name=username.title(),
                roles=roles, created_at=b.now(), tokens={token})
    b.users[user.id] = user
    return user


def add_template(b: Backend, name: str, display_name: str, *, owner: User, parameters: list[ParameterSpec],
                 presets: dict[str, dict[str, str]] | None = None, apps: list[str] | None = None,
                 description: str = "", allow_cancel: bool = True, build_error: str = "",
                 startup_error: bool = False, schedule: dict | None = None,
                 subdomain_apps: list[str] | None = None) -> Template:
    """A template with one version; `schedule` sets default_ttl_ms, activity_bump_ms, allow_user_autostop,
    max_deadline_ms."""
    org = b.default_org()
    template_id, version_id = new_id(), new_id()
    version = TemplateVersion(
        id=version_id, template_id=template_id, name=f"{name}-v1", parameters=parameters,
        presets=[Preset(id=new_id(), name=n, parameters=dict(p), default=(i == 0))
                 for i, (n, p) in enumerate((presets or {}).items())],
        apps=list(apps or []), created_at=b.now(), build_error=build_error, startup_error=startup_error,
        subdomain_apps=list(subdomain_apps or []))
    template = Template(id=template_id, organization_id=org.id, name=name, display_name=display_name,
                        description=description, active_version_id=version_id, created_by=owner.id,
                        created_at=b.now(), updated_at=b.now(), allow_user_cancel_workspace_jobs=allow_cancel,
                        **(schedule or {}))
    b.versions[version_id] = version
    b.templates[template_id] = template
    return template


def seed_empty(b: Backend, token: str) -> User:
    """A deployment with nothing in it but org `coder` and its site owner `demo`, whose token is `token`
    (an empty Coder still has its first user: the token the emulator prints works)."""
    b.reset()
    org = Organization(id=new_id(), name="coder", display_name="Coder", is_default=True, created_at=b.now())
    b.orgs[org.id] = org
    return add_user(b, "demo", token, ["owner"])


def seed_demo(b: Backend, token: str, *, settle: bool = True, runtime: str = "agentapi",
              workspaces: bool = True) -> None:
    """User `demo` (site owner) in org `coder`, two fleet templates, a plain one,
    and two workspaces the fleet must never show or touch; a second user `alice`
    with a fleet agent of her own. With `runtime="runner"` the fleet templates'
    agents declare the runner's app `fleet` (not AgentAPI's `ccw`) and its
    optional model and budget parameters. Without `workspaces` (the `fleet` seed) the users and templates
    only: with the runner runtime each of those workspaces runs the real Claude Code."""
    if settle:
        b.clock.backdate(SETTLE_S)  # the seed's history lies in the past: once settled, the clock reads now
    demo = seed_empty(b, token)
    alice = add_user(b, "alice", f"{token}-alice", [])
    role_presets = {role: {"fleet_mcp_role": role} for role in ROLES}
    runner = runtime == "runner"
    apps = [fleet_app(runtime)]
    fleet = add_template(b, "fleet-demo", "Fleet Demo", owner=demo, parameters=fleet_parameters(runner),
                         presets=role_presets, apps=apps, description="Claude Code agents for the demo project")
    add_template(b, "fleet-research", "Research Lab", owner=demo, parameters=fleet_parameters(runner), apps=apps,
                 description="Research agents; roles come from the role parameter", allow_cancel=False)
    plain = add_template(b, "docker", "Docker Containers", owner=demo, apps=["code-server"],
                         parameters=[ParameterSpec("cpu", default_value="2", options=[
                             {"name": "2 cores", "value": "2"}, {"name": "4 cores", "value": "4"}])],
                         description="A plain development workspace")
    if workspaces:
        b.create_workspace(demo, "me", {"name": "dev-box", "template_id": plain.id})
        b.create_workspace(demo, "me", {"name": "hand-made", "template_id": fleet.id, "rich_parameter_values": [
            {"name": "fleet_mcp_role", "value": "manager"}, {"name": "fleet_mcp_agent_spec", "value": "Made by hand"}]})
        b.create_workspace(alice, "me", {"name": "alice-agent", "template_id": fleet.id, "rich_parameter_values": [
            {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_project", "value": "fleet-demo"},
            {"name": "fleet_mcp_agent_spec", "value": "Alice's own agent"}]})
    if settle:
        b.clock.advance(SETTLE_S)


def bulk_fleet(b: Backend, count: int, *, template: str = "fleet-demo", owner: str = "demo",
               prefix: str = "bench", spec: str = "Benchmark agent") -> list[str]:
    """Create `count` fleet agents and run their clocks until they are up."""
    user = next(u for u in b.users.values() if u.username == owner)
    t = next((t for t in b.templates.values() if t.name == template), None)
    if t is None:  # a control-API caller's mistake: a 400 saying so, not a 500
        raise ValueError(f"no template {template!r}")
    names = []
    for i in range(count):
        name = f"{prefix}-{i + 1:04d}"
        b.create_workspace(user, "me", {"name": name, "template_id": t.id, "rich_parameter_values": [
            {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_project", "value": t.name},
            {"name": "fleet_mcp_agent_spec", "value": spec}, {"name": "fleet_mcp_current_task", "value": spec}]})
        names.append(name)
    b.clock.advance(30)
    return names
