"""list_agent_projects, list_agent_roles and create_agent, through a real MCP client."""

from __future__ import annotations

import httpx
import pytest

from tests.support import create_workspace

SPEC = "Implement OAuth2 login. Include tests."


async def workspace_names(coder: httpx.AsyncClient) -> list[str]:
    r = await coder.get("/api/v2/workspaces")
    return sorted(w["name"] for w in r.json()["workspaces"])


async def test_projects_are_the_fleet_ready_templates(tools):
    projects = (await tools("list_agent_projects"))["projects"]
    assert [(p["name"], p["display_name"]) for p in projects] == [
        ("fleet-demo", "Fleet Demo"), ("fleet-research", "Research Lab")]
    assert projects[0]["template_name"] == "fleet-demo" and projects[0]["template_id"]


@pytest.mark.parametrize("project", ["fleet-demo", "Fleet Demo", "FLEET DEMO", " fleet-demo "])
async def test_roles_from_presets_by_name_or_display_name(tools, project):
    roles = (await tools("list_agent_roles", project=project))["roles"]
    assert [(r["name"], r["display_name"]) for r in roles] == [
        ("coder", "Software Engineer"), ("operator", "Operations Engineer"), ("manager", "Engineering Manager")]
    assert all(r["description"] for r in roles)


async def test_roles_from_the_role_parameter_when_no_presets(tools):
    roles = (await tools("list_agent_roles", project="Research Lab"))["roles"]
    assert [r["name"] for r in roles] == ["coder", "operator", "manager"]


@pytest.mark.parametrize("project", ["nope", "docker", ""])
async def test_roles_of_an_unknown_or_plain_template_is_not_found(tools, project):
    error = await tools.error("list_agent_roles", project=project)
    assert error["error"] == "not_found"


async def test_create_agent_answers_busy_with_the_spec_as_task(tools, coder):
    created = await tools("create_agent", name="papi", project="Fleet Demo", role="operator", spec=SPEC)
    agent = created["agent"]
    assert agent["status"] == "busy" and agent["workspace_status"] == "pending"  # the contract: busy on creation
    assert agent["current_task"] == SPEC and agent["spec"] == SPEC
    assert (agent["role"], agent["project"]) == ("operator", "fleet-demo")
    assert agent["created_at"].endswith("Z") and agent["updated_at"].endswith("Z")
    assert agent["metadata"] == {
        "fleet_mcp_agent_name": "papi", "fleet_mcp_role": "operator", "fleet_mcp_project": "fleet-demo",
        "fleet_mcp_agent_spec": SPEC, "fleet_mcp_current_task": SPEC, "fleet_mcp_pull_request_url": None,
        "fleet_mcp_model": None,  # runner projects only (issue 14)
        "fleet_mcp_pull_request_status": None, "fleet_mcp_pull_request_check_status": None}
    assert "papi" in created["message"]
    ws = (await coder.get("/api/v2/users/me/workspace/papi")).json()
    assert ws["id"] == agent["workspace_id"] and ws["latest_build"]["template_version_preset_id"]
    params = (await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")).json()
    assert {p["name"]: p["value"] for p in params} == {
        "fleet_mcp_managed": "true", "fleet_mcp_role": "operator", "fleet_mcp_project": "fleet-demo",
        "fleet_mcp_agent_spec": SPEC, "fleet_mcp_current_task": SPEC}


async def test_create_agent_default_role_and_role_from_parameter_options(tools, coder):
    await tools("create_agent", name="res-1", project="fleet-research", role="manager", spec=SPEC)
    ws = (await coder.get("/api/v2/users/me/workspace/res-1")).json()
    assert ws["latest_build"]["template_version_preset_id"] is None
    params = (await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")).json()
    assert {p["name"]: p["value"] for p in params}["fleet_mcp_role"] == "manager"
    assert (await tools("create_agent", name="res-2", project="fleet-research", spec=SPEC))["agent"]["role"] == "coder"


BAD_CREATES = [
    ({"name": "", "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "x" * 21, "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "bad_name", "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "-x", "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "new", "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "owner:me", "project": "fleet-demo", "spec": SPEC}, "name"),
    ({"name": "ok", "project": "nope", "spec": SPEC}, "project"),
    ({"name": "ok", "project": "docker", "spec": SPEC}, "project"),
    ({"name": "ok", "project": "fleet-demo", "role": "wizard", "spec": SPEC}, "role"),
    ({"name": "ok", "project": "fleet-demo", "spec": ""}, "spec"),
    ({"name": "ok", "project": "fleet-demo", "spec": "   \n"}, "spec"),
    ({"name": "ok", "project": "fleet-demo", "spec": "x" * 65_537}, "spec"),
]


@pytest.mark.parametrize(("arguments", "what"), BAD_CREATES)
async def test_bad_create_is_bad_request_and_changes_nothing(tools, coder, arguments, what):
    before = await workspace_names(coder)
    error = await tools.error("create_agent", **arguments)
    assert error["error"] == "bad_request", error
    assert await workspace_names(coder) == before


async def test_spec_of_65536_characters_is_accepted(tools):
    assert (await tools("create_agent", name="big", project="fleet-demo", spec="x" * 65_536))["agent"]["name"] == "big"


@pytest.mark.parametrize("name", ["papi", "PAPI", "hand-made", "Dev-Box"])
async def test_taken_names_in_any_case_are_bad_request(tools, coder, name):
    await tools("create_agent", name="papi", project="fleet-demo", spec=SPEC)
    before = await workspace_names(coder)
    error = await tools.error("create_agent", name=name, project="fleet-demo", spec=SPEC)
    assert error["error"] == "bad_request" and "already exists" in error["message"]
    assert await workspace_names(coder) == before


async def test_missing_or_extra_arguments_are_bad_request(tools, coder):
    before = await workspace_names(coder)
    missing = await tools.error("create_agent", name="x")
    assert missing["error"] == "bad_request" and "project" in missing["message"] and "spec" in missing["message"]
    extra = await tools.error("create_agent", name="x", project="fleet-demo", spec=SPEC, owner="alice")
    assert extra["error"] == "bad_request" and extra["details"]["problems"][0]["field"] == "owner"
    wrong_type = await tools.error("create_agent", name=["x"], project="fleet-demo", spec=SPEC)
    assert wrong_type["error"] == "bad_request"
    assert await workspace_names(coder) == before


async def test_other_users_names_do_not_collide(tools, coder):
    assert (await tools("create_agent", name="alice-agent", project="fleet-demo", spec=SPEC))["agent"]["name"]
    assert (await create_workspace(coder, "unrelated")).status_code == 201
