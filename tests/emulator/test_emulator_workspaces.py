"""Creating, finding and listing workspaces: Coder's rules, through HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import create_workspace, template_named

FLEET = {"fleet_mcp_managed": "true", "fleet_mcp_agent_spec": "Do the thing"}


async def params_of(coder: httpx.AsyncClient, ws: dict[str, Any]) -> dict[str, str]:
    r = await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")
    return {p["name"]: p["value"] for p in r.json()}


async def test_create_answers_201_with_a_pending_build(coder):
    r = await create_workspace(coder, "agent-1", params=FLEET)
    assert r.status_code == 201
    ws = r.json()
    assert ws["name"] == "agent-1" and ws["owner_name"] == "demo"
    assert ws["latest_build"]["status"] == "pending" and ws["latest_build"]["transition"] == "start"
    assert ws["latest_build"]["resources"] == []


async def test_deprecated_org_member_route_creates_too(coder):
    t = await template_named(coder, "fleet-demo")
    r = await coder.post(f"/api/v2/organizations/{t['organization_id']}/members/me/workspaces",
                         json={"name": "old-route", "template_id": t["id"]})
    assert r.status_code == 201 and r.json()["template_name"] == "fleet-demo"


@pytest.mark.parametrize("name", ["bad_name", "-lead", "trail-", "a--b", "x" * 33, "new", "CREATE", "sp ace", "ünï", "nl\n"])
async def test_invalid_names_are_refused(coder, name):
    r = await create_workspace(coder, name)
    assert r.status_code == 400
    assert r.json()["message"] == "Validation failed."
    assert r.json()["validations"][0]["field"] == "name"


async def test_name_of_32_chars_is_fine(coder):
    assert (await create_workspace(coder, "a" * 32)).status_code == 201


async def test_names_are_unique_per_owner_ignoring_case(coder, alice):
    assert (await create_workspace(coder, "Twin")).status_code == 201
    r = await create_workspace(coder, "twin")
    assert r.status_code == 409
    assert r.json()["message"] == 'Workspace "twin" already exists.'
    assert r.json()["validations"] == [{"field": "name", "detail": "This value is already in use and should be unique."}]
    assert (await create_workspace(alice, "twin")).status_code == 201  # another owner


async def test_exactly_one_of_template_id_and_version_id(coder):
    t = await template_named(coder, "fleet-demo")
    both = {"name": "both", "template_id": t["id"], "template_version_id": t["active_version_id"]}
    assert (await coder.post("/api/v2/users/me/workspaces", json=both)).status_code == 400
    neither = {"name": "neither"}
    assert (await coder.post("/api/v2/users/me/workspaces", json=neither)).status_code == 400
    by_version = {"name": "by-version", "template_version_id": t["active_version_id"]}
    assert (await coder.post("/api/v2/users/me/workspaces", json=by_version)).status_code == 201


async def test_unknown_template_is_400(coder):
    r = await coder.post("/api/v2/users/me/workspaces",
                         json={"name": "x", "template_id": "00000000-0000-0000-0000-000000000001"})
    assert r.status_code == 400
    assert r.json()["validations"] == [{"field": "template_id", "detail": "template not found"}]


async def test_declared_parameters_stored_with_defaults_undeclared_dropped(coder):
    r = await create_workspace(coder, "params", params={"fleet_mcp_managed": "true", "not_declared": "lost"})
    values = await params_of(coder, r.json())
    assert values == {"fleet_mcp_managed": "true", "fleet_mcp_role": "coder", "fleet_mcp_project": "",
                      "fleet_mcp_agent_spec": "", "fleet_mcp_current_task": ""}


async def test_preset_values_win_over_given_ones(coder):
    t = await template_named(coder, "fleet-demo")
    presets = (await coder.get(f"/api/v2/templateversions/{t['active_version_id']}/presets")).json()
    manager = next(p for p in presets if p["Name"] == "manager")
    r = await create_workspace(coder, "preset", params={"fleet_mcp_role": "coder"},
                               template_version_preset_id=manager["ID"])
    assert r.json()["latest_build"]["template_version_preset_id"] == manager["ID"]
    assert (await params_of(coder, r.json()))["fleet_mcp_role"] == "manager"


async def test_option_and_regex_validation(coder):
    r = await create_workspace(coder, "bad-role", params={"fleet_mcp_role": "wizard"})
    assert r.status_code == 400
    assert r.json()["message"] == 'Unable to validate parameter "fleet_mcp_role"'
    r = await create_workspace(coder, "bad-project", params={"fleet_mcp_project": "no spaces allowed"})
    assert r.status_code == 400
    assert r.json()["detail"] == "letters, digits, . _ - (max 63) or empty"


async def test_immutable_parameter_refused_on_a_later_build(coder, emulator):
    await coder.post("/emulator/templates", json={
        "name": "frozen", "parameters": ["fleet_mcp_managed", {"name": "region", "mutable": False,
                                                               "default_value": "eu"}]})
    ws = (await create_workspace(coder, "frozen-ws", template="frozen", params={"region": "us"})).json()
    emulator.advance(10)
    stop = {"transition": "stop", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json=stop)
    assert r.status_code == 400
    assert r.json()["detail"] == 'Parameter "region" is not mutable, so it can\'t be updated after creating a workspace.'
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    assert r.status_code == 201


async def test_parameters_carry_from_build_to_build(coder, emulator):
    ws = (await create_workspace(coder, "carry", params={**FLEET, "fleet_mcp_role": "operator"})).json()
    emulator.advance(10)
    stop = (await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={
        "transition": "stop", "rich_parameter_values": [{"name": "fleet_mcp_current_task", "value": "next"}]})).json()
    r = await coder.get(f"/api/v2/workspacebuilds/{stop['id']}/parameters")
    values = {p["name"]: p["value"] for p in r.json()}
    assert values["fleet_mcp_role"] == "operator" and values["fleet_mcp_agent_spec"] == "Do the thing"
    assert values["fleet_mcp_current_task"] == "next"


async def test_lookup_by_owner_and_name(coder):
    ws = (await create_workspace(coder, "findme")).json()
    assert (await coder.get("/api/v2/users/me/workspace/findme")).json()["id"] == ws["id"]
    assert (await coder.get("/api/v2/users/demo/workspace/findme")).json()["id"] == ws["id"]
    assert (await coder.get("/api/v2/users/me/workspace/FINDME")).json()["id"] == ws["id"]  # LOWER(name) in Coder
    assert (await coder.get("/api/v2/users/me/workspace/findm")).status_code == 404


async def test_members_cannot_see_other_users_workspaces(coder, alice):
    ws = (await create_workspace(coder, "private")).json()
    assert (await alice.get(f"/api/v2/workspaces/{ws['id']}")).status_code == 404
    assert (await alice.get("/api/v2/users/demo/workspace/private")).status_code == 404
    names = [w["name"] for w in (await alice.get("/api/v2/workspaces")).json()["workspaces"]]
    assert names == ["alice-agent"]


class TestListQuery:
    @pytest.fixture(autouse=True)
    async def fleet(self, coder, emulator):
        await create_workspace(coder, "alpha-one", params=FLEET)
        await create_workspace(coder, "beta-two", params={**FLEET, "fleet_mcp_role": "manager"})
        await create_workspace(coder, "gamma", template="docker")
        emulator.advance(10)
        await create_workspace(coder, "delta-pending", params=FLEET)

    async def names(self, coder: httpx.AsyncClient, q: str, **params: str | int) -> tuple[list[str], int]:
        r = await coder.get("/api/v2/workspaces", params={"q": q, **params})
        assert r.status_code == 200, r.text
        return [w["name"] for w in r.json()["workspaces"]], r.json()["count"]

    async def test_owner_me_and_by_name(self, coder):
        mine, _ = await self.names(coder, "owner:me")
        assert "alice-agent" not in mine and {"alpha-one", "dev-box", "hand-made"} <= set(mine)
        everyone, _ = await self.names(coder, "")  # a site owner sees every workspace
        assert "alice-agent" in everyone
        assert (await self.names(coder, "owner:alice"))[0] == ["alice-agent"]

    async def test_name_is_a_substring_match(self, coder):
        assert (await self.names(coder, "owner:me name:ALPHA"))[0] == ["alpha-one"]
        assert set((await self.names(coder, "owner:me ta-"))[0]) == {"beta-two", "delta-pending"}

    async def test_template_status_and_agent(self, coder):
        assert (await self.names(coder, "template:docker"))[0] == ["dev-box", "gamma"]
        assert (await self.names(coder, "owner:me status:pending"))[0] == ["delta-pending"]
        running, _ = await self.names(coder, "owner:me status:running has-agent:connected")
        assert "delta-pending" not in running and "alpha-one" in running

    async def test_param_presence_and_value(self, coder):
        managed, count = await self.names(coder, "owner:me param:fleet_mcp_managed=true")
        assert managed == ["alpha-one", "beta-two", "delta-pending"] and count == 3
        assert (await self.names(coder, "owner:me param:fleet_mcp_role=MANAGER"))[0] == ["beta-two", "hand-made"]
        has_role, _ = await self.names(coder, "owner:me param:fleet_mcp_role")
        assert "gamma" not in has_role and "hand-made" in has_role

    async def test_running_first_then_owner_then_name(self, coder):
        everyone, _ = await self.names(coder, "")
        assert everyone == ["alice-agent", "alpha-one", "beta-two", "dev-box", "gamma", "hand-made", "delta-pending"]

    async def test_limit_offset_and_total_count(self, coder):
        page, count = await self.names(coder, "owner:me param:fleet_mcp_managed=true", limit=2, offset=1)
        assert page == ["beta-two", "delta-pending"] and count == 3
        r = await coder.get("/api/v2/workspaces", params={"limit": "-1"})
        assert r.status_code == 400 and r.json()["message"] == "Query parameters have invalid values."

    @pytest.mark.parametrize("q", ["colour:red", "status:started", "owner:", "param:x=", "a/b/c"])
    async def test_bad_queries_are_400(self, coder, q):
        r = await coder.get("/api/v2/workspaces", params={"q": q})
        assert r.status_code == 400
        assert r.json()["message"] == "Invalid workspace search query."
