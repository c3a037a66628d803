"""Builds and the lifecycle on the virtual clock: start, stop, delete, cancel, fail."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import create_workspace

FLEET = {"fleet_mcp_managed": "true", "fleet_mcp_agent_spec": "Build things"}


async def get(coder: httpx.AsyncClient, ws_id: str) -> dict[str, Any]:
    r = await coder.get(f"/api/v2/workspaces/{ws_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def agent_of(ws: dict[str, Any]) -> dict[str, Any] | None:
    resources = ws["latest_build"]["resources"]
    return resources[0]["agents"][0] if resources and resources[0]["agents"] else None


async def test_start_build_walks_through_every_state(coder, emulator):
    ws = (await create_workspace(coder, "walker", params=FLEET)).json()
    seen: list[Any] = []
    for _ in range(40):
        w = await get(coder, ws["id"])
        agent = agent_of(w)
        app = agent["apps"][0] if agent else None
        step = (w["latest_build"]["job"]["status"], w["latest_build"]["status"],
                agent and agent["status"], agent and agent["lifecycle_state"], app and app["health"])
        if not seen or seen[-1] != step:
            seen.append(step)
        emulator.advance(0.1)
    assert seen == [
        ("pending", "pending", None, None, None),
        ("running", "starting", None, None, None),
        ("succeeded", "running", "connecting", "created", "initializing"),
        ("succeeded", "running", "connected", "starting", "initializing"),
        ("succeeded", "running", "connected", "ready", "initializing"),
        ("succeeded", "running", "connected", "ready", "healthy"),
    ]
    w = await get(coder, ws["id"])
    assert w["latest_build"]["job"]["completed_at"] is not None and w["health"]["healthy"] is True


async def test_stop_then_start_again(coder, emulator):
    ws = (await create_workspace(coder, "sleepy", params=FLEET)).json()
    emulator.advance(10)
    stop = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    assert stop.status_code == 201 and stop.json()["build_number"] == 2
    emulator.advance(0.5)
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "stopping"
    emulator.advance(5)
    w = await get(coder, ws["id"])
    assert w["latest_build"]["status"] == "stopped" and agent_of(w) is None
    start = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})
    assert start.status_code == 201
    emulator.advance(10)
    w = await get(coder, ws["id"])
    assert w["latest_build"]["status"] == "running" and (agent_of(w) or {}).get("lifecycle_state") == "ready"


async def test_a_second_build_while_one_is_active_is_409(coder):
    ws = (await create_workspace(coder, "busy-build")).json()
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    assert r.status_code == 409 and r.json()["message"] == "A workspace build is already active."


async def test_delete_then_410_and_gone_from_lists(coder, emulator):
    ws = (await create_workspace(coder, "doomed", params=FLEET)).json()
    emulator.advance(10)
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "delete"})
    assert r.status_code == 201 and r.json()["transition"] == "delete"
    emulator.advance(0.5)
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "deleting"
    emulator.advance(5)
    r = await coder.get(f"/api/v2/workspaces/{ws['id']}")
    assert r.status_code == 410 and "was deleted" in r.json()["message"]
    r = await coder.get(f"/api/v2/workspaces/{ws['id']}", params={"include_deleted": "true"})
    assert r.json()["latest_build"]["status"] == "deleted"
    names = [w["name"] for w in (await coder.get("/api/v2/workspaces")).json()["workspaces"]]
    assert "doomed" not in names
    assert (await coder.get("/api/v2/users/me/workspace/doomed")).status_code == 404
    # start/stop of a deleted workspace are refused; another delete is accepted
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})
    assert r.status_code == 409 and r.json()["message"] == "Cannot start a deleted workspace!"
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "delete"})
    assert r.status_code == 201
    # the name is free again
    assert (await create_workspace(coder, "doomed")).status_code == 201


async def test_builds_newest_first_and_by_id(coder, emulator):
    ws = (await create_workspace(coder, "history")).json()
    emulator.advance(10)
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    builds = (await coder.get(f"/api/v2/workspaces/{ws['id']}/builds")).json()
    assert [(b["build_number"], b["transition"]) for b in builds] == [(2, "stop"), (1, "start")]
    one = (await coder.get(f"/api/v2/workspacebuilds/{builds[1]['id']}")).json()
    assert one["status"] == "running" and one["resources"][0]["agents"][0]["name"] == "main"


async def test_bad_transition_is_400(coder):
    ws = (await create_workspace(coder, "odd")).json()
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "restart"})
    assert r.status_code == 400


async def test_cancel_allowed_by_template(coder, emulator):
    ws = (await create_workspace(coder, "cancel-me")).json()
    build_id = ws["latest_build"]["id"]
    r = await coder.patch(f"/api/v2/workspacebuilds/{build_id}/cancel")
    assert r.status_code == 200 and r.json()["message"] == "Job has been marked as canceled..."
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "canceling"
    emulator.advance(2)
    w = await get(coder, ws["id"])
    assert w["latest_build"]["status"] == "canceled" and w["latest_build"]["job"]["status"] == "canceled"
    r = await coder.patch(f"/api/v2/workspacebuilds/{build_id}/cancel")
    assert r.status_code == 400 and r.json()["message"] == "Job has already completed!"


async def test_cancel_refused_for_members_unless_template_allows(alice, emulator):
    ws = (await create_workspace(alice, "no-cancel", template="fleet-research")).json()
    r = await alice.patch(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/cancel")
    assert r.status_code == 403
    assert r.json()["message"] == "User is not allowed to cancel workspace builds. Owner role is required."
    ok = (await create_workspace(alice, "may-cancel", template="fleet-demo")).json()
    assert (await alice.patch(f"/api/v2/workspacebuilds/{ok['latest_build']['id']}/cancel")).status_code == 200


async def test_failing_template_fails_its_builds(coder, emulator):
    await coder.post("/emulator/templates", json={"name": "broken", "build_error": "terraform apply: boom"})
    ws = (await create_workspace(coder, "broken-ws", template="broken")).json()
    emulator.advance(10)
    w = await get(coder, ws["id"])
    assert w["latest_build"]["status"] == "failed"
    assert w["latest_build"]["job"]["error"] == "terraform apply: boom"
    delete = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "delete"})
    assert delete.status_code == 201


async def test_agent_startup_error_shows_in_lifecycle_and_health(coder, emulator):
    await coder.post("/emulator/templates", json={"name": "flaky", "startup_error": True})
    ws = (await create_workspace(coder, "flaky-ws", template="flaky")).json()
    emulator.advance(10)
    w = await get(coder, ws["id"])
    agent = agent_of(w)
    assert agent is not None and agent["lifecycle_state"] == "start_error"
    assert agent["health"] == {"healthy": False, "reason": "agent startup script exited with an error"}
    assert w["health"]["healthy"] is False and w["health"]["failing_agents"] == [agent["id"]]


async def test_rate_limit_per_user_and_endpoint(coder, emulator):
    await coder.post("/emulator/rate-limit", json={"enabled": True})
    for _ in range(512):
        assert (await coder.get("/api/v2/users/me")).status_code == 200
    r = await coder.get("/api/v2/users/me")
    assert r.status_code == 429
    assert r.json()["message"] == "You've been rate limited for sending more than 512 requests in 1m0s."
    assert int(r.headers["Retry-After"]) >= 1
    assert (await coder.get("/api/v2/organizations")).status_code == 200  # another endpoint
    emulator.advance(61)
    assert (await coder.get("/api/v2/users/me")).status_code == 200
