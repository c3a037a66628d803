"""Workspace agents report app statuses with their own token, as Coder's
`PATCH /api/v2/workspaceagents/me/app-status` takes them (coderd/workspaceagents.go)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.support import create_workspace

ROUTE = "/api/v2/workspaceagents/me/app-status"
NOT_AUTHORIZED = ("The agent cannot authenticate until the workspace provision job has been completed. If the job "
                  "is no longer running, this agent is invalid.")


async def started(coder: httpx.AsyncClient, emulator: Emulator, name: str = "reporter") -> dict[str, Any]:
    """A workspace whose agent has the app `fleet` (nothing in the emulator reports for it), up and running."""
    if (await coder.get("/api/v2/organizations/coder/templates/runner-agents")).status_code == 404:
        await coder.post("/emulator/templates", json={"name": "runner-agents", "apps": ["fleet"]})
    ws: dict[str, Any] = (await create_workspace(coder, name, template="runner-agents")).json()
    emulator.advance(30)
    return ws


async def token_of(coder: httpx.AsyncClient, name: str) -> str:
    r = await coder.get(f"/emulator/agents/{name}/token")
    assert r.status_code == 200, r.text
    token: str = r.json()["token"]
    return token


async def report(coder: httpx.AsyncClient, token: str | None, body: dict[str, Any]) -> httpx.Response:
    headers = {"Coder-Session-Token": token} if token is not None else {}
    # The agent's request carries only its own token, never the user's.
    return await coder.patch(ROUTE, json=body, headers={"Coder-Session-Token": ""} | headers)


async def workspace(coder: httpx.AsyncClient, ws_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await coder.get(f"/api/v2/workspaces/{ws_id}")).json()
    return body


def app_of(ws: dict[str, Any], slug: str = "fleet") -> dict[str, Any]:
    agent = ws["latest_build"]["resources"][0]["agents"][0]
    return next(a for a in agent["apps"] if a["slug"] == slug)


async def test_a_report_shows_as_the_latest_status_and_in_the_apps_history(coder, emulator):
    ws = await started(coder, emulator)
    token = await token_of(coder, "reporter")
    body = {"app_slug": "fleet", "state": "working", "message": "Fixing the login bug", "uri": ""}
    r = await report(coder, token, body)
    assert (r.status_code, r.content.strip(), r.headers["content-type"]) == (200, b"null", "application/json")
    emulator.advance(1)
    r = await report(coder, token, {"app_slug": "fleet", "state": "complete", "message": "Done: opened a PR",
                                    "uri": "https://github.com/example/repo/pull/7"})
    assert r.status_code == 200
    shown = await workspace(coder, ws["id"])
    latest, app = shown["latest_app_status"], app_of(shown)
    agent = shown["latest_build"]["resources"][0]["agents"][0]
    assert (latest["state"], latest["message"], latest["uri"]) == (
        "complete", "Done: opened a PR", "https://github.com/example/repo/pull/7")
    assert latest["app_id"] == app["id"] and latest["agent_id"] == agent["id"] and latest["workspace_id"] == ws["id"]
    assert [s["state"] for s in app["statuses"]] == ["complete", "working"]  # newest first


async def test_each_agent_has_its_own_token_and_a_restart_brings_a_new_one(coder, emulator):
    ws = await started(coder, emulator, "one")
    await started(coder, emulator, "two")
    first, second = await token_of(coder, "one"), await token_of(coder, "two")
    assert first != second
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    emulator.advance(0.5)  # the stop job runs: the old agent may still report its last words
    assert (await report(coder, first, {"app_slug": "fleet", "state": "idle", "message": "bye"})).status_code == 200
    emulator.advance(10)
    r = await report(coder, first, {"app_slug": "fleet", "state": "idle", "message": "late"})
    assert (r.status_code, r.json()) == (401, {"message": "Workspace agent not authorized.",
                                               "detail": NOT_AUTHORIZED})
    assert (await coder.get("/emulator/agents/one/token")).status_code == 409  # stopped: no agent
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})
    emulator.advance(30)
    assert await token_of(coder, "one") not in (first, second)


@pytest.mark.parametrize(("token", "message", "detail"), [
    (None, 'Cookie "coder_session_token" must be provided.', None),
    ("demo-token", "Workspace agent token invalid.", "An agent token must be a valid UUIDv4. (len 10)"),
    ("6f0c1a52-3b7e-4a8e-9d49-2f1b8e0c7a11", "Workspace agent not authorized.", NOT_AUTHORIZED),
])
async def test_a_request_without_the_agents_token_is_401(coder, emulator, token, message, detail):
    await started(coder, emulator)
    r = await report(coder, token, {"app_slug": "fleet", "state": "working", "message": "x"})
    assert r.status_code == 401 and r.json()["message"] == message and r.json().get("detail") == detail


@pytest.mark.parametrize(("body", "message", "detail"), [
    ({"app_slug": "fleet", "state": "busy", "message": "x"}, "Failed to parse request.", "Invalid state: busy"),
    ({"app_slug": "fleet", "message": "x"}, "Failed to parse request.", "Invalid state: "),
    ({"app_slug": "fleet", "state": "working", "message": "x" * 161}, "Message is too long.",
     "Message must be less than 160 characters."),
    ({"app_slug": "fleet", "state": "working", "message": "é" * 81}, "Message is too long.",  # 162 bytes
     "Message must be less than 160 characters."),
    ({"app_slug": "nope", "state": "working", "message": "x"}, "Failed to get workspace app.",
     'No app found with slug "nope"'),
    ({"app_slug": "fleet", "state": "working", "message": 5}, "Request body must be valid JSON.",
     "json: cannot unmarshal number into Go struct field PatchAppStatus.message of type string"),
    (["working"], "Request body must be valid JSON.",
     "json: cannot unmarshal array into Go value of type agentsdk.PatchAppStatus"),
])
async def test_bad_reports_are_400_and_change_nothing(coder, emulator, body, message, detail):
    ws = await started(coder, emulator)
    token = await token_of(coder, "reporter")
    r = await report(coder, token, body)
    assert r.status_code == 400 and r.json()["message"] == message and r.json()["detail"] == detail
    if message == "Message is too long.":
        assert r.json()["validations"] == [{"field": "message", "detail": detail}]
    shown = await workspace(coder, ws["id"])
    assert shown["latest_app_status"] is None and app_of(shown)["statuses"] == []


async def test_state_is_case_insensitive_and_160_bytes_pass(coder, emulator):
    ws = await started(coder, emulator)
    token = await token_of(coder, "reporter")
    assert (await report(coder, token, {"app_slug": "fleet", "state": "Idle", "message": "y" * 160})).status_code == 200
    latest = (await workspace(coder, ws["id"]))["latest_app_status"]
    assert latest["state"] == "idle" and latest["message"] == "y" * 160


async def test_messages_are_sanitized_as_coder_does(coder, emulator):
    ws = await started(coder, emulator)
    token = await token_of(coder, "reporter")
    raw = "  Needs input:\tBash <b>make</b>\x1b[31m test\x1b[0m\n && <script>alert(1)</script>deploy "
    assert (await report(coder, token, {"app_slug": "fleet", "state": "idle", "message": raw})).status_code == 200
    latest = (await workspace(coder, ws["id"]))["latest_app_status"]
    assert latest["message"] == "Needs input: Bash make test &amp;&amp; deploy"
