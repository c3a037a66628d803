"""templates/fleet-agent: the Coder template declares what the fleet sends, and the emulator's seed mirrors it.

Coder silently drops rich parameters a template does not declare, so every
`fleet_mcp_*` value the client sends must be declared here; the roles the fleet
offers are this template's presets; and the AgentAPI app the fleet talks to is
the claude-code module's web app. The demo seed's `fleet-demo` template must
look the same, or the emulator would test the fleet against a template nobody
ships.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import hcl2
import httpx
import pytest

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.seed import ROLE_PROMPTS, ROLES
from fleet_mcp.rules import FLEET_PARAMETERS, PROJECT, ROLE, SPEC
from fleet_mcp.settings import Settings

TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "fleet-agent" / "main.tf"
ROLE_OPTIONS = ["coder", "operator", "manager"]
CLAUDE_CODE_SOURCE = "registry.coder.com/coder/claude-code/coder"
TOKEN = "demo-token"


# --- reading python-hcl2's output -------------------------------------------
# Across versions python-hcl2 may keep the quotes of string literals and block
# labels, wrap expressions in `${…}`, keep heredocs raw (`<<-EOT … EOT`), and add
# bookkeeping keys (`__is_block__`, `__comments__`). `norm` removes all of that.

_HEREDOC = re.compile(r"\A<<(-?)([A-Za-z_][A-Za-z0-9_]*)\n(.*?)\n?[ \t]*\2[ \t]*\Z", re.DOTALL)


def _unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == s[-1] == '"':
        return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), s[1:-1])
    return s


def _unwrap(s: str) -> str:
    """`${expr}` → `expr` when the whole string is one interpolation."""
    if not (s.startswith("${") and s.endswith("}")):
        return s
    depth = 0
    for i, ch in enumerate(s[1:], start=1):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0 and i != len(s) - 1:
            return s  # `${a}-${b}`: a template, not one expression
    return s[2:-1].strip()


def norm_str(s: str) -> str:
    s = _unquote(s)
    heredoc = _HEREDOC.match(s)
    if heredoc:
        body = heredoc[3]
        return textwrap.dedent(body) + "\n" if heredoc[1] else body + "\n"
    return _unwrap(s)


def norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {norm_str(k): norm(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, str):
        return norm_str(value)
    return value


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def labelled(doc: dict, kind: str) -> dict[tuple[str, str], dict]:
    """Two-label blocks (`data`, `resource`): {(type, name): body}."""
    found: dict[tuple[str, str], dict] = {}
    for entry in as_list(doc.get(kind)):
        for type_, named in entry.items():
            for item in as_list(named):
                for name, body in item.items():
                    for one in as_list(body):
                        assert (type_, name) not in found, f"{kind} {type_}.{name} declared twice"
                        found[(type_, name)] = one
    return found


def named(doc: dict, kind: str) -> dict[str, dict]:
    """One-label blocks (`module`, `variable`): {name: body}."""
    found: dict[str, dict] = {}
    for entry in as_list(doc.get(kind)):
        for name, body in entry.items():
            for one in as_list(body):
                assert name not in found, f"{kind} {name} declared twice"
                found[name] = one
    return found


def merged(doc: dict, kind: str) -> dict:
    """Unlabelled blocks that may repeat (`locals`, `terraform`): their bodies merged."""
    out: dict = {}
    for body in as_list(doc.get(kind)):
        out.update(body)
    return out


def flag(value: Any) -> Any:
    """HCL bools as Python bools, whether python-hcl2 gave `true` or "true"."""
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


# --- fixtures -----------------------------------------------------------------

@pytest.fixture(scope="module")
def doc() -> dict:
    with TEMPLATE.open() as f:
        return norm(hcl2.load(f))


@pytest.fixture(scope="module")
def parameters(doc: dict) -> dict[str, dict]:
    """coder_parameter blocks by their `name` (not their Terraform label)."""
    out = {}
    for (type_, label), body in labelled(doc, "data").items():
        if type_ == "coder_parameter":
            assert body["name"] not in out, f"parameter {body['name']} declared twice"
            out[body["name"]] = {**body, "_label": label}
    return out


@pytest.fixture(scope="module")
def presets(doc: dict) -> dict[str, dict]:
    return {body["name"]: body for (type_, _), body in labelled(doc, "data").items()
            if type_ == "coder_workspace_preset"}


@pytest.fixture(scope="module")
def claude_code(doc: dict) -> dict:
    modules = [body for body in named(doc, "module").values() if body.get("source") == CLAUDE_CODE_SOURCE]
    assert len(modules) == 1, "the template must use the claude-code module exactly once"
    return modules[0]


@pytest.fixture(scope="module")
def role_prompts(doc: dict) -> dict[str, str]:
    prompts = merged(doc, "locals").get("role_prompts")
    assert isinstance(prompts, dict), "locals must hold a role_prompts map"
    return prompts


def options(param: dict) -> list[dict]:
    return [{"name": o.get("name", ""), "value": o["value"], "description": o.get("description", "")}
            for o in as_list(param.get("option"))]


def validation(param: dict) -> dict:
    blocks = as_list(param.get("validation"))
    return blocks[0] if blocks else {}


def parameter_ref(param: dict) -> str:
    return f"data.coder_parameter.{param['_label']}.value"


# --- the template itself ----------------------------------------------------------

def test_template_parses(doc: dict) -> None:
    assert labelled(doc, "data") and labelled(doc, "resource") and named(doc, "module")


def test_pins(doc: dict) -> None:
    terraform = merged(doc, "terraform")
    assert terraform["required_version"] == ">= 1.9"
    providers = merged({"p": terraform["required_providers"]}, "p")
    assert providers["coder"]["source"] == "coder/coder"
    assert providers["coder"]["version"] == ">= 2.13, < 3.0"
    assert providers["docker"]["source"] == "kreuzwerker/docker"


def test_declares_every_fleet_parameter(parameters: dict) -> None:
    missing = [name for name in FLEET_PARAMETERS if name not in parameters]
    assert not missing, f"Coder would silently drop {missing}"


@pytest.mark.parametrize("name", FLEET_PARAMETERS)
def test_fleet_parameter_is_mutable_with_a_default(parameters: dict, name: str) -> None:
    param = parameters[name]
    assert flag(param.get("mutable")) is True, f"{name} must be mutable"
    assert "default" in param and param["default"] is not None, f"{name} needs a default (else it is required)"


def test_managed_marker(parameters: dict) -> None:
    managed = parameters["fleet_mcp_managed"]
    assert str(managed["default"]).lower() == "false"
    assert not as_list(managed.get("option")), "the marker takes true/false only"


def test_role_parameter(parameters: dict) -> None:
    role = parameters[ROLE]
    assert [o["value"] for o in options(role)] == ROLE_OPTIONS
    assert role["default"] == "coder"
    assert role.get("type", "string") == "string"


def test_project_validation_accepts_its_default_and_template_names(parameters: dict) -> None:
    project = parameters[PROJECT]
    rule = validation(project)
    assert rule.get("error"), "Coder requires an error message with a regex"
    regex = re.compile(rule["regex"])
    assert regex.match(project["default"])
    for good in ("fleet-agent", "fleet-demo", "web.app_2"):
        assert regex.match(good)
    for bad in ("-x", "a b", "x" * 64, "a$b"):
        assert not regex.match(bad)


@pytest.mark.parametrize("name", ["fleet_mcp_agent_spec", "fleet_mcp_current_task"])
def test_text_parameters_are_textareas(parameters: dict, name: str) -> None:
    assert parameters[name].get("form_type") == "textarea"
    assert parameters[name]["default"] == ""


def test_presets_set_only_their_role(presets: dict, parameters: dict) -> None:
    assert sorted(presets) == sorted(ROLE_OPTIONS)
    for name, preset in presets.items():
        assert preset["parameters"] == {ROLE: name}, f"preset {name} must set {ROLE} and nothing else"
        assert name in [o["value"] for o in options(parameters[ROLE])]
    assert [n for n, p in presets.items() if flag(p.get("default"))] == ["coder"], "exactly one default preset"


def test_preset_descriptions_match_role_options(presets: dict, parameters: dict) -> None:
    # The fleet describes a role from its preset, else from the option: both say the same.
    described = {o["value"]: o["description"] for o in options(parameters[ROLE])}
    for name, preset in presets.items():
        assert preset.get("description", described[name]) == described[name]


def test_claude_code_module(claude_code: dict) -> None:
    assert claude_code["version"] == "4.9.2"
    assert flag(claude_code.get("web_app", True)) is True, "web_app off = no `ccw` app, no route to AgentAPI"
    assert flag(claude_code.get("report_tasks", True)) is True, "report_tasks off = no system prompt, no statuses"
    assert flag(claude_code.get("continue")) is True
    assert flag(claude_code.get("dangerously_skip_permissions")) is True
    assert claude_code.get("agentapi_version") == "v0.12.1"
    assert claude_code["agent_id"] == "coder_agent.main.id"
    assert claude_code["count"] == "data.coder_workspace.me.start_count"
    assert claude_code["subdomain"].startswith("var.")
    assert claude_code["claude_api_key"] == "var.anthropic_api_key"


def test_web_app_slug_is_the_clients_default(claude_code: dict, doc: dict) -> None:
    # claude-code 4.x names its web app `ccw`; the client's default slug must agree,
    # and the template must not declare an app of that slug itself (duplicate slug).
    assert Settings.model_fields["agentapi_app_slug"].default == "ccw"
    for (type_, _), body in labelled(doc, "resource").items():
        if type_ == "coder_app":
            assert body.get("slug") != "ccw"


def test_ai_prompt_is_the_spec(claude_code: dict, parameters: dict) -> None:
    assert claude_code["ai_prompt"] == parameter_ref(parameters[SPEC])


def test_system_prompt_comes_from_the_role_map(claude_code: dict, doc: dict, parameters: dict) -> None:
    locals_ = merged(doc, "locals")
    prompt = claude_code["system_prompt"]
    if prompt.startswith("local."):
        prompt = locals_[prompt.removeprefix("local.")]
    assert "local.role_prompts" in prompt and parameter_ref(parameters[ROLE]) in prompt


def test_role_prompts(role_prompts: dict) -> None:
    assert sorted(role_prompts) == sorted(ROLE_OPTIONS)
    for role, prompt in role_prompts.items():
        assert prompt.strip(), f"empty prompt for {role}"
        assert "$" not in prompt, f"the agent expands $ in environment values: {role}'s prompt has one"
        assert "%{" not in prompt


def test_no_coder_ai_task(doc: dict) -> None:
    kinds = {type_ for kind in ("resource", "data") for type_, _ in labelled(doc, kind)}
    assert "coder_ai_task" not in kinds
    assert not re.search(r'^\s*(resource|data)\s+"?coder_ai_task', TEMPLATE.read_text(), re.MULTILINE)


def test_credentials_are_sensitive_variables(doc: dict, parameters: dict) -> None:
    variables = named(doc, "variable")
    key = variables["anthropic_api_key"]
    assert flag(key.get("sensitive")) is True and key.get("default") == ""
    if "claude_code_oauth_token" in variables:
        assert flag(variables["claude_code_oauth_token"].get("sensitive")) is True
    assert not any("key" in name or "token" in name for name in parameters), "parameters are readable metadata"


def test_compute(doc: dict) -> None:
    resources = labelled(doc, "resource")
    assert ("coder_agent", "main") in resources
    assert any(t == "docker_volume" for t, _ in resources)
    containers = [body for (t, _), body in resources.items() if t == "docker_container"]
    assert len(containers) == 1
    container = containers[0]
    assert container["count"] == "data.coder_workspace.me.start_count"
    assert container["image"] == "codercom/example-base:ubuntu"
    assert container["user"] == "coder", "Claude refuses --dangerously-skip-permissions as root"


# --- the emulator's demo seed mirrors the template ----------------------------------

async def _seeded_fleet_templates() -> tuple[Emulator, dict[str, tuple[list[dict], list[dict] | None]]]:
    emulator = Emulator(token=TOKEN)
    headers = {"Coder-Session-Token": TOKEN}
    out = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder",
                                 headers=headers) as http:
        templates = (await http.get("/api/v2/templates")).raise_for_status().json()
        for t in templates:
            version = t["active_version_id"]
            params = (await http.get(f"/api/v2/templateversions/{version}/rich-parameters")).raise_for_status().json()
            if not set(FLEET_PARAMETERS) <= {p["name"] for p in params}:
                continue
            presets = (await http.get(f"/api/v2/templateversions/{version}/presets")).raise_for_status().json()
            out[t["name"]] = (params, presets)
    return emulator, out


def _pick(d: dict, *keys: str) -> Any:
    """A field under either casing (presets are PascalCase in real Coder)."""
    for key in keys:
        if key in d:
            return d[key]
    raise KeyError(keys)


@pytest.fixture(scope="module")
def seeded() -> tuple[Emulator, dict]:
    return asyncio.run(_seeded_fleet_templates())


def test_seed_has_the_fleet_demo_template(seeded: tuple) -> None:
    _, templates = seeded
    assert "fleet-demo" in templates


@pytest.mark.parametrize("template", ["fleet-demo", "fleet-research"])
def test_seed_declares_the_template_parameters(seeded: tuple, parameters: dict, template: str) -> None:
    _, templates = seeded
    seed_params = {p["name"]: p for p in templates[template][0]}
    for name in FLEET_PARAMETERS:
        hcl, seed = parameters[name], seed_params[name]
        default = hcl["default"]
        if isinstance(default, bool):  # `default = false` unquoted: Coder stores "false"
            default = str(default).lower()
        assert seed["default_value"] == default, name
        assert seed["type"] == hcl.get("type", "string"), name
        assert seed["mutable"] is flag(hcl["mutable"]), name
        assert seed["form_type"] == hcl.get("form_type", "input"), name
        assert [{"name": o["name"], "value": o["value"], "description": o["description"]}
                for o in seed["options"]] == options(hcl), name
        rule = validation(hcl)
        assert seed.get("validation_regex", "") == rule.get("regex", ""), name
        assert seed.get("validation_error", "") == rule.get("error", ""), name


def test_seed_presets_match_the_template(seeded: tuple, presets: dict) -> None:
    _, templates = seeded
    seed_presets = templates["fleet-demo"][1] or []
    got = {_pick(p, "Name", "name"): {_pick(x, "Name", "name"): _pick(x, "Value", "value")
                                      for x in _pick(p, "Parameters", "parameters") or []}
           for p in seed_presets}
    assert got == {name: norm(p["parameters"]) for name, p in presets.items()}
    defaults = [_pick(p, "Name", "name") for p in seed_presets if _pick(p, "Default", "default")]
    assert defaults == [n for n, p in presets.items() if flag(p.get("default"))]


def test_seed_template_has_the_agentapi_app(seeded: tuple) -> None:
    emulator, _ = seeded
    backend = emulator.backend
    fleet_demo = next(t for t in backend.templates.values() if t.name == "fleet-demo")
    assert Settings.model_fields["agentapi_app_slug"].default in backend.versions[fleet_demo.active_version_id].apps


def test_seed_roles_match_the_role_map(role_prompts: dict, parameters: dict) -> None:
    assert set(ROLES) == set(role_prompts)
    assert set(ROLE_PROMPTS) == set(role_prompts)
    assert all("$" not in p for p in ROLE_PROMPTS.values())
    # The seed's role titles and descriptions are the template's option names and descriptions.
    assert {role: (title, what) for role, (title, what) in ROLES.items()} == \
        {o["value"]: (o["name"], o["description"]) for o in options(parameters[ROLE])}
