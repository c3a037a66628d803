"""templates/fleet-agent under either driver declares what the fleet sends, and the emulator's seed mirrors it.

Coder silently drops rich parameters a template does not declare, so every
`fleet_mcp_*` value the client sends must be declared; the roles the fleet
offers are the presets; and the app the fleet talks to picks its driver: the
template variable `driver` counts in `fleet` (`fleet-mcp runner`, the local
module modules/runner) or `ccw` (AgentAPI from the claude-code module 4.x).
The demo seed (`Emulator(agent_runtime=...)`) must look the same, or the
emulator would test the fleet against templates nobody ships.
None of this is `terraform validate` (no provider registry here): it reads the
HCL for the contract; `terraform fmt` runs where terraform is installed.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.coder.seed import ROLE_PROMPTS, ROLES
from fleet_mcp.fleet.rules import FLEET_PARAMETERS, PROJECT, ROLE, RUNNER_PARAMETERS, SPEC
from fleet_mcp.settings import Settings
from tests.hcl_reader import (
    DRIVERS,
    TEMPLATES,
    as_list,
    flag,
    labelled,
    load_dir,
    merged,
    named,
    of_type,
    options,
    parameter_ref,
    template,
    validation,
)
from tests.hcl_reader import parameters as parameters_of
from tests.hcl_reader import presets as presets_of

HERE = TEMPLATES / "fleet-agent"
APP = {"runner": "fleet", "agentapi": "ccw"}
# 2.13: the claude-code module's nested agentapi module reads data.coder_task (`terraform init` fetches it whatever
# the driver); presets need 2.9.
CODER_PROVIDER = ">= 2.13, < 3.0"
ROLE_OPTIONS = ["coder", "operator", "manager"]
CLAUDE_CODE_SOURCE = "registry.coder.com/coder/claude-code/coder"
TOKEN = "demo-token"


@pytest.fixture(scope="module", params=DRIVERS)
def kind(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    return param


@pytest.fixture(scope="module")
def doc(kind: str) -> dict[str, Any]:
    return template(kind)


@pytest.fixture(scope="module")
def parameters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return parameters_of(doc)


@pytest.fixture(scope="module")
def presets(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return presets_of(doc)


@pytest.fixture(scope="module")
def role_prompts(doc: dict[str, Any]) -> dict[str, str]:
    prompts = merged(doc, "locals").get("role_prompts")
    assert isinstance(prompts, dict), "locals must hold a role_prompts map"
    return prompts


# --- one template, the driver a variable ---------------------------------------------

def test_one_template_directory() -> None:
    # `coder templates push -d DIR` tars DIR alone (symlinks as links): the shared part and both drivers live in it.
    assert sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir()) == ["fleet-agent"]
    assert sorted(str(p.relative_to(HERE)) for p in HERE.rglob("*.tf")) == ["main.tf", "modules/runner/main.tf"]


def test_the_driver_variable_counts_in_one_module() -> None:
    root = load_dir(HERE)
    driver = named(root, "variable")["driver"]
    assert driver["default"] == "runner"
    assert re.fullmatch(r'contains\(\["runner", "agentapi"\], var\.driver\)', as_list(driver["validation"])[0]["condition"])
    counts = {name: call["count"] for name, call in named(root, "module").items()}
    assert counts == {"runner": 'var.driver == "runner" ? 1 : 0',
                      "claude-code": 'var.driver == "agentapi" ? data.coder_workspace.me.start_count : 0'}
    # Each driver's variant is its own: what one counts in, the other does not.
    assert not set(of_type(template("agentapi"), "resource", "coder_app"))
    assert not named(template("runner"), "module")


@pytest.mark.system
@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
def test_terraform_fmt() -> None:
    done = subprocess.run(["terraform", "fmt", "-check", "-recursive", "-diff", str(TEMPLATES)], capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null"})
    assert done.returncode == 0, done.stdout + done.stderr


# --- the contract both drivers keep -------------------------------------------------

def test_template_parses(doc: dict[str, Any]) -> None:
    assert labelled(doc, "data") and labelled(doc, "resource")


def test_pins(doc: dict[str, Any]) -> None:
    terraform = merged(doc, "terraform")
    assert terraform["required_version"] == ">= 1.9"
    providers = merged({"p": terraform["required_providers"]}, "p")
    assert providers["coder"]["source"] == "coder/coder"
    assert providers["coder"]["version"] == CODER_PROVIDER
    assert providers["docker"]["source"] == "kreuzwerker/docker"


def test_declares_every_fleet_parameter(parameters: dict[str, Any]) -> None:
    missing = [name for name in FLEET_PARAMETERS if name not in parameters]
    assert not missing, f"Coder would silently drop {missing}"


@pytest.mark.parametrize("name", FLEET_PARAMETERS)
def test_fleet_parameter_is_mutable_with_a_default(parameters: dict[str, Any], name: str) -> None:
    param = parameters[name]
    assert flag(param.get("mutable")) is True, f"{name} must be mutable"
    assert "default" in param and param["default"] is not None, f"{name} needs a default (else it is required)"


def test_managed_marker(parameters: dict[str, Any]) -> None:
    managed = parameters["fleet_mcp_managed"]
    assert str(managed["default"]).lower() == "false"
    assert not as_list(managed.get("option")), "the marker takes true/false only"


def test_role_parameter(parameters: dict[str, Any]) -> None:
    role = parameters[ROLE]
    assert [o["value"] for o in options(role)] == ROLE_OPTIONS
    assert role["default"] == "coder"
    assert role.get("type", "string") == "string"


def test_project_validation_accepts_its_default_and_template_names(parameters: dict[str, Any]) -> None:
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
def test_text_parameters_are_textareas(parameters: dict[str, Any], name: str) -> None:
    assert parameters[name].get("form_type") == "textarea"
    assert parameters[name]["default"] == ""


def test_presets_set_only_their_role(presets: dict[str, Any], parameters: dict[str, Any]) -> None:
    assert sorted(presets) == sorted(ROLE_OPTIONS)
    for name, preset in presets.items():
        assert preset["parameters"] == {ROLE: name}, f"preset {name} must set {ROLE} and nothing else"
        assert name in [o["value"] for o in options(parameters[ROLE])]
    assert [n for n, p in presets.items() if flag(p.get("default"))] == ["coder"], "exactly one default preset"


def test_preset_descriptions_match_role_options(presets: dict[str, Any], parameters: dict[str, Any]) -> None:
    # The fleet describes a role from its preset, else from the option: both say the same.
    described = {o["value"]: o["description"] for o in options(parameters[ROLE])}
    for name, preset in presets.items():
        assert preset.get("description", described[name]) == described[name]


def test_role_prompts(role_prompts: dict[str, Any], doc: dict[str, Any]) -> None:
    endings = merged(doc, "locals")["role_endings"]
    assert sorted(endings) == sorted(DRIVERS), "every driver ends every role's prompt"
    assert sorted(role_prompts) == sorted(ROLE_OPTIONS)
    for role, prompt in role_prompts.items():
        for text in (prompt, *(endings[driver][role] for driver in DRIVERS)):
            assert text.strip(), f"empty prompt for {role}"
            assert "$" not in text, f"the agent expands $ in environment values: {role}'s prompt has one"
            assert "%{" not in text
    assert "coder_report_task" in endings["agentapi"]["coder"] and "summary" in endings["runner"]["coder"]


def test_system_prompt_comes_from_the_role_map(doc: dict[str, Any], parameters: dict[str, Any]) -> None:
    locals_ = merged(doc, "locals")
    assert parameter_ref(parameters[ROLE]) in locals_["role"] and "keys(local.role_prompts)" in locals_["role"]
    assert locals_["system_prompt"] == "${local.role_prompts[local.role]}${local.role_endings[var.driver][local.role]}\n"


def test_no_coder_ai_task(doc: dict[str, Any]) -> None:
    kinds = {type_ for k in ("resource", "data") for type_, _ in labelled(doc, k)}
    assert "coder_ai_task" not in kinds
    for tf in HERE.rglob("*.tf"):
        assert not re.search(r'^\s*(resource|data)\s+"?coder_ai_task', tf.read_text(), re.MULTILINE), tf


def test_credentials_are_sensitive_variables(doc: dict[str, Any], parameters: dict[str, Any]) -> None:
    variables = named(doc, "variable")
    key = variables["anthropic_api_key"]
    assert flag(key.get("sensitive")) is True and key.get("default") == ""
    assert flag(variables["claude_code_oauth_token"].get("sensitive")) is True
    # Parameters are readable by whoever reads the workspace: no credential of Claude's goes there. The runner's
    # key does, by design: only a caller holding it gets into the runner, and the workspace's readers are the
    # owner (the fleet's own user), admins who may open the app anyway, and the agent token (specs/runner.md).
    readable = [name for name in parameters if ("key" in name or "token" in name) and name != "fleet_mcp_runner_key"]
    assert not readable, "parameters are readable metadata"


def test_compute(doc: dict[str, Any]) -> None:
    resources = labelled(doc, "resource")
    assert ("coder_agent", "main") in resources
    assert any(t == "docker_volume" for t, _ in resources)
    containers = [body for (t, _), body in resources.items() if t == "docker_container"]
    assert len(containers) == 1
    container = containers[0]
    assert container["count"] == "data.coder_workspace.me.start_count"
    assert container["image"] == "codercom/example-base:ubuntu"
    assert container["user"] == "coder", "Claude refuses to skip permissions as root"


def test_runner_parameters_only_where_the_runner_runs(parameters: dict[str, Any], kind: str) -> None:
    # create_agent sends model and budgets exactly when the template declares them; AgentAPI could not use them.
    declared = [p for p in RUNNER_PARAMETERS if p in parameters]
    assert declared == (list(RUNNER_PARAMETERS) if kind == "runner" else [])


# --- the AgentAPI driver: claude-code 4.x ----------------------------------------------

@pytest.fixture(scope="module")
def claude_code() -> dict[str, Any]:
    doc = template("agentapi")
    modules = [body for body in named(doc, "module").values() if body.get("source") == CLAUDE_CODE_SOURCE]
    assert len(modules) == 1, "the AgentAPI driver must use the claude-code module exactly once"
    return modules[0]


def test_claude_code_module(claude_code: dict[str, Any]) -> None:
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
    assert claude_code["system_prompt"] == "local.system_prompt"


def test_web_app_slug_is_the_clients_default() -> None:
    # claude-code 4.x names its web app `ccw`; the client's default slug must agree, and the template
    # must not declare an app of that slug itself (duplicate slug).
    assert Settings.model_fields["agentapi_app_slug"].default == APP["agentapi"]
    assert not [a for a in of_type(template("agentapi"), "resource", "coder_app").values()
                if a.get("slug") == APP["agentapi"]]


def test_ai_prompt_is_the_spec(claude_code: dict[str, Any]) -> None:
    assert claude_code["ai_prompt"] == parameter_ref(parameters_of(template("agentapi"))[SPEC])


# --- the emulator's demo seed mirrors the template of its runtime ----------------------

async def _seeded_fleet_templates(kind: str) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]]:
    """{template: (rich parameters, presets, the first agent's app slugs)} of the seed's fleet templates."""
    emulator = Emulator(token=TOKEN, agent_runtime=kind)
    out = {}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder",
                                     headers={"Coder-Session-Token": TOKEN}) as http:
            for t in (await http.get("/api/v2/templates")).raise_for_status().json():
                version = f"/api/v2/templateversions/{t['active_version_id']}"
                params = (await http.get(f"{version}/rich-parameters")).raise_for_status().json()
                if not set(FLEET_PARAMETERS) <= {p["name"] for p in params}:
                    continue
                presets = (await http.get(f"{version}/presets")).raise_for_status().json() or []
                resources = (await http.get(f"{version}/resources")).raise_for_status().json()
                apps = [a["slug"] for r in resources for agent in r["agents"] for a in agent["apps"]]
                out[t["name"]] = (params, presets, apps)
    finally:
        emulator.close()
    return out


def _pick(d: dict[str, Any], *keys: str) -> Any:
    """A field under either casing (presets are PascalCase in real Coder)."""
    for key in keys:
        if key in d:
            return d[key]
    raise KeyError(keys)


@pytest.fixture(scope="module")
def seeded(kind: str) -> dict[str, Any]:
    return asyncio.run(_seeded_fleet_templates(kind))


@pytest.mark.parametrize("template", ["fleet-demo", "fleet-research"])
def test_seed_declares_the_template_parameters(seeded: dict[str, Any], parameters: dict[str, Any], template: str) -> None:
    seed_params = {p["name"]: p for p in seeded[template][0]}
    assert set(seed_params) == set(parameters), "the seed declares what the template declares, no more"
    for name, hcl in parameters.items():
        seed = seed_params[name]
        default = hcl["default"]
        if isinstance(default, bool):  # `default = false` unquoted: Coder stores "false"
            default = str(default).lower()
        assert seed["default_value"] == default, name
        assert seed["type"] == hcl.get("type", "string"), name
        assert seed["mutable"] is flag(hcl["mutable"]), name
        assert seed["form_type"] == hcl.get("form_type", "input"), name
        assert seed["display_name"] == hcl.get("display_name", ""), name
        assert [{"name": o["name"], "value": o["value"], "description": o["description"]}
                for o in seed["options"]] == options(hcl), name
        rule = validation(hcl)
        assert seed.get("validation_regex", "") == rule.get("regex", ""), name
        assert seed.get("validation_error", "") == rule.get("error", ""), name


def test_seed_presets_match_the_template(seeded: dict[str, Any], presets: dict[str, Any]) -> None:
    seed_presets = seeded["fleet-demo"][1]
    got = {_pick(p, "Name", "name"): {_pick(x, "Name", "name"): _pick(x, "Value", "value")
                                      for x in _pick(p, "Parameters", "parameters") or []}
           for p in seed_presets}
    assert got == {name: p["parameters"] for name, p in presets.items()}
    defaults = [_pick(p, "Name", "name") for p in seed_presets if _pick(p, "Default", "default")]
    assert defaults == [n for n, p in presets.items() if flag(p.get("default"))]


@pytest.mark.parametrize("template", ["fleet-demo", "fleet-research"])
def test_seed_agents_offer_the_templates_app(seeded: dict[str, Any], kind: str, template: str) -> None:
    assert seeded[template][2] == [APP[kind]]


def test_seed_roles_match_the_role_map(role_prompts: dict[str, Any], parameters: dict[str, Any]) -> None:
    assert set(ROLES) == set(role_prompts)
    assert set(ROLE_PROMPTS) == set(role_prompts)
    assert all("$" not in p for p in ROLE_PROMPTS.values())
    # The seed's role titles and descriptions are the template's option names and descriptions.
    assert {role: (title, what) for role, (title, what) in ROLES.items()} == \
        {o["value"]: (o["name"], o["description"]) for o in options(parameters[ROLE])}
