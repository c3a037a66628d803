"""The emulator's identity, template and deployment routes, through HTTP."""

from __future__ import annotations

import httpx
import pytest

from tests.support import client_for


async def test_buildinfo_needs_no_token(emulator, conformance):
    async with client_for(emulator, conformance, token=None) as anonymous:
        r = await anonymous.get("/api/v2/buildinfo")
    assert r.status_code == 200
    assert r.json()["version"].startswith("v2.37")
    assert r.headers["X-Coder-Build-Version"] == r.json()["version"]


@pytest.mark.parametrize("headers", [{"Coder-Session-Token": "demo-token"}, {"Authorization": "Bearer demo-token"}])
async def test_both_auth_headers_are_accepted(emulator, conformance, headers):
    async with client_for(emulator, conformance, token=None) as client:
        r = await client.get("/api/v2/users/me", headers=headers)
    assert r.status_code == 200
    assert r.json()["username"] == "demo"


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_missing_or_bad_token_is_401_in_coders_words(emulator, conformance, token):
    async with client_for(emulator, conformance, token=token) as client:
        r = await client.get("/api/v2/workspaces")
    assert r.status_code == 401
    assert r.json()["message"] == (
        "You are signed out or your session has expired. Please sign in again to continue.")


async def test_users_by_me_name_and_id(coder):
    me = (await coder.get("/api/v2/users/me")).json()
    assert me["roles"][0]["name"] == "owner"
    assert (await coder.get("/api/v2/users/demo")).json()["id"] == me["id"]
    assert (await coder.get(f"/api/v2/users/{me['id']}")).json()["username"] == "demo"
    r = await coder.get("/api/v2/users/nobody")
    assert r.status_code == 400
    assert r.json()["message"] == '"user" must be an existing uuid or username.'


async def test_organizations(coder):
    orgs = (await coder.get("/api/v2/organizations")).json()
    assert [(o["name"], o["is_default"]) for o in orgs] == [("coder", True)]


async def test_templates_list_and_query(coder):
    names = [t["name"] for t in (await coder.get("/api/v2/templates")).json()]
    assert names == ["docker", "fleet-demo", "fleet-research"]
    r = await coder.get("/api/v2/templates", params={"q": "exact_name:fleet-demo"})
    assert [t["display_name"] for t in r.json()] == ["Fleet Demo"]
    r = await coder.get("/api/v2/templates", params={"q": "name:fleet"})
    assert len(r.json()) == 2
    r = await coder.get("/api/v2/templates", params={"q": "research"})  # bare words: display name
    assert [t["name"] for t in r.json()] == ["fleet-research"]
    r = await coder.get("/api/v2/templates", params={"q": "bogus:1"})
    assert r.status_code == 400 and r.json()["validations"][0]["field"] == "bogus"


async def test_template_by_name_and_id(coder):
    t = (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).json()
    assert (await coder.get(f"/api/v2/templates/{t['id']}")).json()["name"] == "fleet-demo"
    assert (await coder.get("/api/v2/organizations/default/templates/fleet-demo")).json()["id"] == t["id"]
    r = await coder.get("/api/v2/organizations/coder/templates/nope")
    assert r.status_code == 404
    assert r.json()["message"] == "Resource not found or you do not have access to this resource"
    r = await coder.get("/api/v2/templates/not-a-uuid")
    assert r.status_code == 400 and r.json()["message"] == 'Invalid UUID "not-a-uuid".'


async def test_template_version_parameters_and_presets(coder):
    t = (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).json()
    version = (await coder.get(f"/api/v2/templateversions/{t['active_version_id']}")).json()
    assert version["template_id"] == t["id"] and version["job"]["status"] == "succeeded"
    params = (await coder.get(f"/api/v2/templateversions/{t['active_version_id']}/rich-parameters")).json()
    assert [p["name"] for p in params] == [
        "fleet_mcp_managed", "fleet_mcp_role", "fleet_mcp_project", "fleet_mcp_agent_spec", "fleet_mcp_current_task"]
    role = params[1]
    assert [o["value"] for o in role["options"]] == ["coder", "operator", "manager"]
    presets = (await coder.get(f"/api/v2/templateversions/{t['active_version_id']}/presets")).json()
    # PascalCase, as real Coder sends (codersdk.Preset has no JSON tags).
    assert [(p["Name"], p["Parameters"]) for p in presets] == [
        (role, [{"Name": "fleet_mcp_role", "Value": role}]) for role in ("coder", "operator", "manager")]
    assert set(presets[0]) == {"ID", "Name", "Description", "Icon", "Default", "DesiredPrebuildInstances",
                               "Parameters"}


async def test_version_without_presets_answers_null(coder):
    t = (await coder.get("/api/v2/organizations/coder/templates/fleet-research")).json()
    r = await coder.get(f"/api/v2/templateversions/{t['active_version_id']}/presets")
    assert r.status_code == 200 and r.text == "null"


async def test_regions(coder):
    region = (await coder.get("/api/v2/regions")).json()["regions"][0]
    assert region["path_app_url"] == "http://coder.test" and region["healthy"] is True


async def test_unknown_api_route_is_404_json(coder):
    r = await coder.get("/api/v2/nothing/here")
    assert r.status_code == 404 and r.json() == {"message": "Route not found."}


async def test_every_response_names_the_version(coder):
    r = await coder.get("/api/v2/workspaces/00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404
    assert r.headers["X-Coder-Build-Version"] == "v2.37.0+emulator"


def test_client_for_is_plain_httpx(emulator, conformance):
    assert isinstance(client_for(emulator, conformance), httpx.AsyncClient)


async def test_template_version_resources_list_the_agents_apps(coder):
    t = (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).json()
    path = f"/api/v2/templateversions/{t['active_version_id']}/resources"
    r = await coder.get(path)
    assert r.status_code == 200
    [resource] = r.json()
    assert resource["workspace_transition"] == "start" and resource["job_id"] == t["active_version_id"]
    [agent] = resource["agents"]
    # The import's agent never connects; its apps carry no statuses.
    assert (agent["name"], agent["status"], agent["lifecycle_state"]) == ("main", "connecting", "created")
    assert [(a["slug"], a["statuses"], a["subdomain"], "subdomain_name" in a) for a in agent["apps"]] == [
        ("ccw", [], False, False)]  # omitempty: only subdomain apps are named one
    again = (await coder.get(path)).json()
    assert again[0]["agents"][0]["apps"][0]["id"] == agent["apps"][0]["id"]  # stable, as rows in a database
    docker = (await coder.get("/api/v2/organizations/coder/templates/docker")).json()
    docker_resources = (await coder.get(f"/api/v2/templateversions/{docker['active_version_id']}/resources")).json()
    assert [a["slug"] for a in docker_resources[0]["agents"][0]["apps"]] == ["code-server"]
    r = await coder.get("/api/v2/templateversions/00000000-0000-0000-0000-000000000000/resources")
    assert r.status_code == 404
