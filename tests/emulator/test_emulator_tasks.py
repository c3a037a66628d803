"""Coder v2.36's Tasks API in the emulator, through HTTP only; every JSON answer is checked by `client_for`.

`Emulator(coder_version="2.36")` has the routes (under /api/v2/tasks and
/api/experimental/tasks) over the same workspaces and AgentAPI sessions; the
default emulator, like current Coder, answers 404 "Route not found." to all of
them. The virtual clock drives each task's life (`emulator.advance`).
"""

from __future__ import annotations

import httpx
import pytest
from support import TOKEN, client_for, create_workspace, template_named

from fleet_mcp.emulator import Emulator

BUSY = "Task app is not ready to accept input."


@pytest.fixture
def emulator() -> Emulator:
    return Emulator(coder_version="2.36", token=TOKEN)


async def new_task(coder: httpx.AsyncClient, prompt: str = "Fix the login test [[finish:4]]", **extra) -> dict:
    t = await template_named(coder, "tasks-demo")
    r = await coder.post("/api/v2/tasks/me", json={"template_version_id": t["active_version_id"], "input": prompt,
                                                   **extra})
    assert r.status_code == 201, r.text
    return r.json()


async def get(coder: httpx.AsyncClient, task: dict, user: str = "me") -> dict:
    r = await coder.get(f"/api/v2/tasks/{user}/{task['id']}")
    assert r.status_code == 200, r.text
    return r.json()


async def until(coder, emulator, task: dict, want: str, state: str | None = None, limit: float = 30) -> dict:
    """Advance the clock in small steps until the task has `want` status (and `current_state.state`)."""
    for _ in range(int(limit / 0.25)):
        found = await get(coder, task)
        if found["status"] == want and (state is None or (found["current_state"] or {}).get("state") == state):
            return found
        emulator.advance(0.25)
    raise AssertionError(f"task never became {want}/{state}: {found['status']} {found['current_state']}")


async def send(coder, task: dict, text: str) -> httpx.Response:
    return await coder.post(f"/api/v2/tasks/me/{task['id']}/send", json={"input": text})


async def logs(coder, task: dict) -> dict:
    r = await coder.get(f"/api/v2/tasks/me/{task['id']}/logs")
    assert r.status_code == 200, r.text
    return r.json()


def error(r: httpx.Response, status: int, message: str, detail: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.json()["message"] == message
    if detail is not None:
        assert r.json()["detail"] == detail


# --- version modes ----------------------------------------------------------------

ROUTES = [("GET", ""), ("POST", "/me"), ("GET", "/me/some-task"), ("DELETE", "/me/some-task"),
          ("POST", "/me/some-task/send"), ("GET", "/me/some-task/logs")]


@pytest.mark.parametrize("prefix", ["/api/v2/tasks", "/api/experimental/tasks"])
@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_current_coder_has_no_tasks_routes(conformance, prefix, method, path):
    async with client_for(Emulator(token=TOKEN), conformance) as coder:
        r = await coder.request(method, prefix + path, json={"input": "x"} if method == "POST" else None)
        assert r.status_code == 404
        assert r.json() == {"message": "Route not found."}
        assert (await coder.get("/api/v2/buildinfo")).json()["version"] == "v2.37.0+emulator"


async def test_v2_36_says_so_and_seeds_an_ai_task_template(coder):
    assert (await coder.get("/api/v2/buildinfo")).json()["version"] == "v2.36.0+emulator"
    r = await coder.get("/api/v2/tasks")
    assert r.status_code == 200 and r.json() == {"tasks": [], "count": 0}
    names = {t["name"] for t in (await coder.get("/api/v2/templates")).json()}
    assert "tasks-demo" in names
    assert (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).status_code == 200


# --- create -----------------------------------------------------------------------

async def test_create_runs_a_workspace_whose_claude_takes_the_input(coder, emulator):
    task = await new_task(coder, "Fix the flaky login test\n[[finish:4]]")
    assert task["name"].startswith("fix-the-flaky-login-test-") and len(task["name"]) == 29
    assert task["display_name"] == "Fix the flaky login test [[finish:4]]"
    assert task["initial_prompt"] == "Fix the flaky login test\n[[finish:4]]"
    assert (task["status"], task["workspace_status"], task["workspace_build_number"]) == ("pending", "pending", 1)
    assert task["template_name"] == "tasks-demo" and task["owner_name"] == "demo"
    assert task["workspace_agent_id"] is task["workspace_app_id"] is task["current_state"] is None
    ws = (await coder.get(f"/api/v2/workspaces/{task['workspace_id']}")).json()
    assert ws["name"] == task["workspace_name"] == task["name"] and ws["task_id"] == task["id"]
    assert ws["latest_build"]["has_ai_task"] is True
    await until(coder, emulator, task, "active", "complete")
    [entry] = (await logs(coder, task))["logs"]
    assert entry["type"] == "output" and entry["content"].startswith("> Fix the flaky login test\n")


async def test_create_with_name_display_name_and_preset(coder):
    t = await template_named(coder, "tasks-demo")
    presets = (await coder.get(f"/api/v2/templateversions/{t['active_version_id']}/presets")).json()
    operator = next(p["ID"] for p in presets if p["Name"] == "operator")
    task = await new_task(coder, "Watch the deploys", name="deploy-watch", display_name="  Deploy watch  ",
                          template_version_preset_id=operator)
    assert (task["name"], task["display_name"]) == ("deploy-watch", "Deploy watch")
    ws = (await coder.get(f"/api/v2/workspaces/{task['workspace_id']}")).json()
    params = (await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")).json()
    assert {"name": "fleet_mcp_role", "value": "operator"} in params


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"template_version_id": None}, 400, "Template version not found or you do not have access to this resource"),
    ({"template_version_id": "nope"}, 400, "Request body must be valid JSON."),
    ({"name": "Bad_Name"}, 400, "Unable to create a Task with the provided name."),
    ({"display_name": "x" * 65}, 400, "Display name must be 64 characters or less."),
    ({"input": 5}, 400, "Request body must be valid JSON."),
])
async def test_create_refusals(coder, body, status, message):
    t = await template_named(coder, "tasks-demo")
    r = await coder.post("/api/v2/tasks/me", json={"template_version_id": t["active_version_id"], **body})
    error(r, status, message)


async def test_create_needs_a_coder_ai_task_template_and_a_known_user(coder):
    fleet = await template_named(coder, "fleet-demo")
    r = await coder.post("/api/v2/tasks/me", json={"template_version_id": fleet["active_version_id"], "input": "x"})
    error(r, 400, 'Template does not have a valid "coder_ai_task" resource.')
    r = await coder.post("/api/v2/tasks/nobody", json={"input": "x"})
    error(r, 400, '"user" must be an existing uuid or username.', 'queried user="nobody"')
    await new_task(coder, "first", name="twice")
    t = await template_named(coder, "tasks-demo")
    r = await coder.post("/api/v2/tasks/me", json={"template_version_id": t["active_version_id"], "name": "twice"})
    error(r, 409, 'Workspace "twice" already exists.')


# --- status over a task's life -------------------------------------------------------

async def test_status_goes_pending_initializing_active_with_claudes_states(coder, emulator):
    task = await new_task(coder, "Tidy the README [[finish:4]]")
    seen, states = [], []
    for _ in range(60):
        found = await get(coder, task)
        step = (found["status"], (found["current_state"] or {}).get("message"))
        if not seen or seen[-1] != step:
            seen.append(step)
        state = (found["current_state"] or {}).get("state")
        if found["status"] == "active" and state and (not states or states[-1] != state):
            states.append(state)
        emulator.advance(0.25)
    statuses = [s for s, _ in seen]
    assert statuses[0] == "pending" and statuses[-1] == "active"
    assert set(statuses) == {"pending", "initializing", "active"}
    notes = [m for s, m in seen if s == "initializing"]
    assert notes[:1] == ["Workspace is starting"] and "Agent is connecting" in notes and "Agent is starting" in notes
    assert "App is initializing" in notes
    assert states == ["working", "complete", "idle"]
    done = await get(coder, task)
    assert done["current_state"]["message"] == "Done: Tidy the README"
    assert done["workspace_agent_lifecycle"] == "ready" and done["workspace_agent_health"] == {"healthy": True}
    ws = (await coder.get(f"/api/v2/workspaces/{task['workspace_id']}")).json()
    assert done["workspace_app_id"] == ws["latest_app_status"]["app_id"]
    assert done["workspace_agent_id"] == ws["latest_build"]["resources"][0]["agents"][0]["id"]


async def test_failure_is_failed_in_current_state(coder, emulator):
    task = await new_task(coder, "Break the build [[fail]] [[finish:2]]")
    found = await until(coder, emulator, task, "active", "failed")
    assert found["current_state"]["message"] == "Failed: Break the build"


async def test_stop_pauses_and_start_resumes_with_fresh_state(coder, emulator):
    task = await new_task(coder, "Long job [[finish:2]]")
    await until(coder, emulator, task, "active", "idle")
    r = await coder.post(f"/api/v2/workspaces/{task['workspace_id']}/builds", json={"transition": "stop"})
    assert r.status_code == 201
    emulator.advance(0.5)  # the stop job runs: coder's view knows no status for it
    assert (await get(coder, task))["status"] == "unknown"
    paused = await until(coder, emulator, task, "paused")
    assert paused["workspace_status"] == "stopped" and paused["workspace_agent_id"] is None
    assert paused["current_state"]["state"] == "idle"  # a stop keeps the last status on show
    error(await send(coder, task, "more"), 409, "Task is paused.", "Resume the task to send messages.")
    snapshot = await logs(coder, task)
    assert snapshot["snapshot"] is True and snapshot["snapshot_at"]
    assert snapshot["logs"][0]["content"].startswith("> Long job")
    r = await coder.post(f"/api/v2/workspaces/{task['workspace_id']}/builds", json={"transition": "start"})
    assert r.status_code == 201
    resumed = await get(coder, task)
    assert resumed["status"] == "pending" and resumed["workspace_build_number"] == 3
    assert resumed["current_state"] is None  # the idle status predates this start build
    error(await send(coder, task, "more"), 409, "Task is pending.")
    emulator.advance(0.5)
    assert (await get(coder, task))["current_state"] == {
        "timestamp": r.json()["created_at"], "state": "working", "message": "Workspace is starting", "uri": ""}
    await until(coder, emulator, task, "active", "idle")


async def test_a_failed_build_or_a_dead_app_is_an_error(coder, emulator):
    r = await coder.post("/emulator/templates", json={"name": "broken-tasks", "build_error": "terraform exploded",
                                                      "has_ai_task": True})
    version = r.json()["active_version_id"]
    broken = (await coder.post("/api/v2/tasks/me", json={"template_version_id": version, "input": "x"})).json()
    assert (await until(coder, emulator, broken, "error"))["workspace_status"] == "failed"
    error(await coder.get(f"/api/v2/tasks/me/{broken['id']}/logs"), 409,
          "Cannot fetch logs for task in current state.", 'Task status is "error".')
    task = await new_task(coder, "Anything [[finish:1]]")
    await until(coder, emulator, task, "active", "idle")
    r = await coder.post(f"/emulator/agents/{task['workspace_name']}/process", json={"running": False})
    assert r.status_code == 200
    assert (await get(coder, task))["status"] == "error"
    error(await send(coder, task, "hello"), 400, "Task must be active.",
          'Task status is "error", it must be "active" to interact with the task.')


# --- send and logs ------------------------------------------------------------------

async def test_send_waits_for_a_stable_agent_then_reaches_claude(coder, emulator):
    task = await new_task(coder, "First turn [[finish:4]]")
    error(await send(coder, task, "hello"), 409, "Task is pending.",
          "The task is resuming. Wait for the task to become active before sending messages.")
    await until(coder, emulator, task, "active", "working")
    error(await send(coder, task, "hello"), 409, BUSY, "Status: running")
    error(await send(coder, task, ""), 400, "Task input is required.")
    await until(coder, emulator, task, "active", "idle")
    r = await send(coder, task, "Now add a changelog entry [[finish:2]]")
    assert r.status_code == 204 and r.content == b""
    error(await send(coder, task, "again"), 409, BUSY, "Status: running")
    found = await until(coder, emulator, task, "active", "complete")
    assert found["current_state"]["message"] == "Done: Now add a changelog entry"
    entries = (await logs(coder, task))["logs"]
    assert [(e["id"], e["type"]) for e in entries] == [(0, "output"), (1, "input"), (2, "output")]
    assert entries[1]["content"] == "Now add a changelog entry [[finish:2]]"
    assert all(e["time"].endswith("Z") for e in entries)


async def test_live_logs_are_agentapis_messages_without_snapshot_keys(coder, emulator):
    task = await new_task(coder, "Say hi [[finish:1]]")
    early = await logs(coder, task)
    assert early == {"logs": [], "snapshot": True}  # pending: no snapshot uploaded yet
    await until(coder, emulator, task, "active", "idle")
    live = await logs(coder, task)
    assert set(live) == {"logs"}  # snapshot=false is omitted, as Go's omitempty does
    name = task["workspace_name"]
    agentapi = (await coder.get(f"/@demo/{name}/apps/ccw/messages")).json()["messages"]
    assert [(e["id"], e["content"]) for e in live["logs"]] == [(m["id"], m["content"]) for m in agentapi]


# --- lookup, list, delete ------------------------------------------------------------

async def test_get_by_uuid_or_name_under_both_prefixes(coder, alice, emulator):
    task = await new_task(coder, "Lookup", name="look-me-up")
    for path in (f"/api/v2/tasks/me/{task['id']}", "/api/v2/tasks/demo/LOOK-ME-UP",
                 f"/api/experimental/tasks/demo/{task['id']}", "/api/experimental/tasks/me/look-me-up"):
        r = await coder.get(path)
        assert r.status_code == 200 and r.json()["id"] == task["id"], path
    error(await coder.get("/api/v2/tasks/me/no-such-task"), 404,
          "Resource not found or you do not have access to this resource")
    error(await alice.get(f"/api/v2/tasks/demo/{task['id']}"), 404,
          "Resource not found or you do not have access to this resource")
    error(await coder.get("/api/v2/tasks/nobody/look-me-up"), 400, '"user" must be an existing uuid or username.')


async def test_list_filters_by_owner_status_and_organization(coder, alice, emulator):
    mine = await new_task(coder, "Mine [[finish:1]]")
    emulator.advance(1)
    r = await alice.post("/api/v2/tasks/me", json={
        "template_version_id": (await template_named(coder, "tasks-demo"))["active_version_id"], "input": "Hers"})
    hers = r.json()
    assert r.status_code == 201 and hers["owner_name"] == "alice"

    async def ids(client, q: str | None = None) -> list[str]:
        r = await client.get("/api/v2/tasks", params={"q": q} if q is not None else None)
        assert r.status_code == 200, r.text
        assert r.json()["count"] == len(r.json()["tasks"])
        return [t["id"] for t in r.json()["tasks"]]

    assert await ids(coder) == [hers["id"], mine["id"]]  # newest first
    assert await ids(alice) == [hers["id"]]
    assert await ids(coder, "owner:me") == await ids(coder, "demo") == [mine["id"]]
    assert await ids(coder, "owner:alice organization:coder") == [hers["id"]]
    await until(coder, emulator, mine, "active")
    assert await ids(coder, "status:active") == [mine["id"]]
    assert await ids(coder, "status:paused") == []
    r = await coder.get("/api/v2/tasks", params={"q": "owner:nobody"})
    error(r, 400, "Invalid task search query.")
    assert r.json()["validations"][0]["field"] == "owner"
    r = await coder.get("/api/v2/tasks", params={"q": "template:x"})
    assert r.json()["validations"] == [{"field": "template", "detail": '"template" is not a valid query param'}]


async def test_delete_queues_a_delete_build_and_the_task_is_gone(coder, emulator):
    task = await new_task(coder, "Short-lived [[finish:1]]")
    await until(coder, emulator, task, "active", "idle")
    r = await coder.delete(f"/api/v2/tasks/me/{task['id']}")
    assert r.status_code == 202 and r.content == b""
    builds = (await coder.get(f"/api/v2/workspaces/{task['workspace_id']}/builds")).json()
    assert (builds[0]["transition"], builds[0]["reason"]) == ("delete", "initiator")
    error(await coder.get(f"/api/v2/tasks/me/{task['id']}"), 404,
          "Resource not found or you do not have access to this resource")
    assert (await coder.get("/api/v2/tasks")).json()["count"] == 0
    emulator.advance(5)
    r = await coder.get(f"/api/v2/workspaces/{task['workspace_id']}")
    assert r.status_code == 410


async def test_deleting_the_workspace_takes_the_task_and_busy_builds_refuse(coder, emulator):
    task = await new_task(coder, "Doomed")
    error(await coder.delete(f"/api/v2/tasks/me/{task['id']}"), 409, "A workspace build is already active.")
    assert (await get(coder, task))["status"] == "pending"
    emulator.advance(10)
    r = await coder.post(f"/api/v2/workspaces/{task['workspace_id']}/builds", json={"transition": "delete"})
    assert r.status_code == 201
    emulator.advance(0.5)
    assert (await get(coder, task))["status"] == "unknown"  # a running delete build
    emulator.advance(5)
    assert (await coder.get(f"/api/v2/tasks/me/{task['id']}")).status_code == 404


async def test_plain_workspaces_stay_taskless(coder, emulator):
    r = await create_workspace(coder, "not-a-task", params={"fleet_mcp_agent_spec": "Plain [[finish:1]]"})
    ws = r.json()
    assert ws["task_id"] is None and ws["latest_build"]["has_ai_task"] is False
    emulator.advance(20)
    assert (await coder.get("/api/v2/tasks")).json()["count"] == 0
