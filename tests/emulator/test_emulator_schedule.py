"""Coder's scheduling on the virtual clock: TTL on create and by PUT, build deadlines,
activity bumps from app statuses, autostop, and templates that impose their TTL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.support import create_workspace

MINUTE, HOUR = 60_000, 3_600_000
NOT_ALLOWED = "Custom autostop TTL is not allowed for workspaces using this template."


async def template(coder: httpx.AsyncClient, name: str, **schedule: object) -> None:
    r = await coder.post("/emulator/templates", json={"name": name, "apps": ["fleet"], **schedule})
    assert r.status_code == 201, r.text


async def up(coder: httpx.AsyncClient, emulator: Emulator, name: str, template_name: str = "timed", **extra: Any) -> dict[str, Any]:
    r = await create_workspace(coder, name, template=template_name, **extra)
    assert r.status_code == 201, r.text
    emulator.advance(30)
    return await get(coder, r.json()["id"])


async def get(coder: httpx.AsyncClient, ws_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await coder.get(f"/api/v2/workspaces/{ws_id}")).json()
    return body


def when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


def completed(ws: dict[str, Any]) -> datetime:
    done = when(ws["latest_build"]["job"]["completed_at"])
    assert done is not None
    return done


async def report(coder: httpx.AsyncClient, name: str, state: str) -> None:
    token = (await coder.get(f"/emulator/agents/{name}/token")).json()["token"]
    r = await coder.patch("/api/v2/workspaceagents/me/app-status", headers={"Coder-Session-Token": token},
                          json={"app_slug": "fleet", "state": state, "message": f"now {state}"})
    assert r.status_code == 200, r.text


async def now(coder: httpx.AsyncClient) -> datetime:
    return datetime.fromisoformat((await coder.get("/emulator/clock")).json()["now"])


@pytest.fixture
async def timed(coder: httpx.AsyncClient) -> None:
    await template(coder, "timed")


async def test_ttl_sets_the_deadline_and_autostop_fires_when_it_passes(coder, emulator, timed):
    ws = await up(coder, emulator, "idle-one", ttl_ms=10 * MINUTE)
    assert ws["ttl_ms"] == 10 * MINUTE and ws["latest_build"]["max_deadline"] is None
    assert when(ws["latest_build"]["deadline"]) == completed(ws) + timedelta(minutes=10)
    emulator.advance(9 * 60)
    assert (await get(coder, ws["id"]))["latest_build"]["transition"] == "start"
    emulator.advance(60)
    stopped = await get(coder, ws["id"])
    build = stopped["latest_build"]
    assert (build["transition"], build["reason"], build["initiator_name"]) == ("stop", "autostop", "demo")
    emulator.advance(30)
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "stopped"


async def test_no_ttl_no_deadline_no_autostop(coder, emulator, timed):
    ws = await up(coder, emulator, "forever")
    assert ws["ttl_ms"] is None and ws["latest_build"]["deadline"] is None
    emulator.advance(48 * 3600)
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "running"


@pytest.mark.parametrize(("ttl", "status", "detail"), [
    (90 * 1000 + 500, 201, None),  # truncated to whole minutes
    (59_999, 400, "time until shutdown must be at least one minute"),
    (30 * 24 * HOUR + MINUTE, 400, "time until shutdown must be less than 30 days"),
    ("10m", 400, "json: cannot unmarshal string into Go struct field CreateWorkspaceRequest.ttl_ms of type int64"),
])
async def test_ttl_on_create_is_checked_as_coder_checks_it(coder, timed, ttl, status, detail):
    r = await create_workspace(coder, "checked", template="timed", ttl_ms=ttl)
    assert r.status_code == status, r.text
    if status == 201:
        assert r.json()["ttl_ms"] == MINUTE
        return
    if isinstance(ttl, str):
        assert r.json()["message"] == "Request body must be valid JSON." and r.json()["detail"] == detail
    else:
        assert r.json()["message"] == "Invalid Workspace Time to Shutdown."
        assert r.json()["validations"] == [{"field": "ttl_ms", "detail": detail}]
    assert (await coder.get("/api/v2/users/me/workspace/checked")).status_code == 404  # nothing created


async def test_working_keeps_the_workspace_up_and_leaving_working_bumps_once_more(coder, emulator, timed):
    ws = await up(coder, emulator, "busy", ttl_ms=10 * MINUTE)
    emulator.advance(5 * 60)
    await report(coder, "busy", "working")
    bumped = when((await get(coder, ws["id"]))["latest_build"]["deadline"])
    assert bumped == await now(coder) + timedelta(hours=1)  # the template's activity bump
    emulator.advance(50 * 60)  # long past the 10 minute TTL: still up
    assert (await get(coder, ws["id"]))["latest_build"]["transition"] == "start"
    await report(coder, "busy", "complete")  # leaving working counts once more
    finished = await now(coder)
    assert when((await get(coder, ws["id"]))["latest_build"]["deadline"]) == finished + timedelta(hours=1)
    emulator.advance(60)
    await report(coder, "busy", "idle")  # neither working nor leaving it: no bump
    assert when((await get(coder, ws["id"]))["latest_build"]["deadline"]) == finished + timedelta(hours=1)
    emulator.advance(59 * 60)
    build = (await get(coder, ws["id"]))["latest_build"]
    assert (build["transition"], build["reason"]) == ("stop", "autostop")


async def test_a_bump_waits_until_five_percent_of_it_has_passed(coder, emulator):
    await template(coder, "short-bump", activity_bump_ms=10 * MINUTE)
    ws = await up(coder, emulator, "fresh", template_name="short-bump", ttl_ms=10 * MINUTE)
    deadline = ws["latest_build"]["deadline"]
    await report(coder, "fresh", "working")  # the deadline is still more than 95% of a bump away
    assert (await get(coder, ws["id"]))["latest_build"]["deadline"] == deadline
    emulator.advance(60)
    await report(coder, "fresh", "working")
    assert when((await get(coder, ws["id"]))["latest_build"]["deadline"]) == await now(coder) + timedelta(minutes=10)


async def test_put_ttl_applies_from_the_next_start_and_none_lifts_the_deadline(coder, emulator, timed):
    ws = await up(coder, emulator, "retimed", ttl_ms=10 * MINUTE)
    deadline = ws["latest_build"]["deadline"]
    r = await coder.put(f"/api/v2/workspaces/{ws['id']}/ttl", json={"ttl_ms": 2 * HOUR})
    assert (r.status_code, r.content) == (204, b"")
    shown = await get(coder, ws["id"])
    assert shown["ttl_ms"] == 2 * HOUR and shown["latest_build"]["deadline"] == deadline
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    emulator.advance(30)
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})
    emulator.advance(30)
    restarted = await get(coder, ws["id"])
    assert when(restarted["latest_build"]["deadline"]) == completed(restarted) + timedelta(hours=2)
    assert (await coder.put(f"/api/v2/workspaces/{ws['id']}/ttl", json={"ttl_ms": None})).status_code == 204
    lifted = await get(coder, ws["id"])
    assert lifted["ttl_ms"] is None and lifted["latest_build"]["deadline"] is None
    emulator.advance(5 * 3600)
    assert (await get(coder, ws["id"]))["latest_build"]["status"] == "running"


async def test_put_ttl_refusals(coder, emulator, alice, timed):
    ws = await up(coder, emulator, "guarded", ttl_ms=10 * MINUTE)
    r = await coder.put(f"/api/v2/workspaces/{ws['id']}/ttl", json={"ttl_ms": 1000})
    assert r.status_code == 400 and r.json()["message"] == "Error updating workspace time until shutdown."
    assert r.json()["validations"] == [{"field": "ttl_ms", "detail": "time until shutdown must be at least one minute"}]
    assert (await alice.put(f"/api/v2/workspaces/{ws['id']}/ttl", json={"ttl_ms": HOUR})).status_code == 404
    assert (await get(coder, ws["id"]))["ttl_ms"] == 10 * MINUTE  # unchanged


async def test_a_template_that_disallows_user_ttl_imposes_its_own(coder, emulator):
    await template(coder, "strict", allow_user_autostop=False, default_ttl_ms=HOUR)
    strict = (await coder.get("/api/v2/organizations/coder/templates/strict")).json()
    assert (strict["allow_user_autostop"], strict["default_ttl_ms"]) == (False, HOUR)
    ws = await up(coder, emulator, "ruled", template_name="strict", ttl_ms=10 * MINUTE)  # taken, but not used
    assert ws["ttl_ms"] == HOUR
    assert when(ws["latest_build"]["deadline"]) == completed(ws) + timedelta(hours=1)
    r = await coder.put(f"/api/v2/workspaces/{ws['id']}/ttl", json={"ttl_ms": 2 * HOUR})
    assert r.status_code == 400 and r.json() == {"message": "Error updating workspace time until shutdown.",
                                                 "validations": [{"field": "ttl_ms", "detail": NOT_ALLOWED}]}


async def test_a_template_default_ttl_applies_when_none_is_given(coder, emulator):
    await template(coder, "defaulted", default_ttl_ms=2 * HOUR)
    ws = await up(coder, emulator, "by-default", template_name="defaulted")
    assert ws["ttl_ms"] == 2 * HOUR
    assert when(ws["latest_build"]["deadline"]) == completed(ws) + timedelta(hours=2)


async def test_bumps_never_pass_the_max_deadline(coder, emulator):
    await template(coder, "capped", max_deadline_ms=2 * HOUR)
    ws = await up(coder, emulator, "capped-one", template_name="capped", ttl_ms=HOUR)
    cap = when(ws["latest_build"]["max_deadline"])
    assert cap == completed(ws) + timedelta(hours=2)
    emulator.advance(50 * 60)
    await report(coder, "capped-one", "working")
    assert when((await get(coder, ws["id"]))["latest_build"]["deadline"]) == await now(coder) + timedelta(hours=1)
    emulator.advance(55 * 60)
    await report(coder, "capped-one", "working")
    assert when((await get(coder, ws["id"]))["latest_build"]["deadline"]) == cap
    emulator.advance(15 * 60)
    assert (await get(coder, ws["id"]))["latest_build"]["reason"] == "autostop"


async def test_the_scripted_claude_code_counts_as_activity(coder, emulator):
    ws = (await create_workspace(coder, "scripted", params={"fleet_mcp_agent_spec": "Work [[finish:1800]]"},
                                 ttl_ms=10 * MINUTE)).json()
    emulator.advance(20 * 60)  # the turn reports working: a bump to an hour after
    assert (await get(coder, ws["id"]))["latest_build"]["transition"] == "start"


@pytest.mark.parametrize("field", [{"default_ttl_ms": "1h"}, {"allow_user_autostop": "no"},
                                   {"activity_bump_ms": -1}])
async def test_bad_schedule_flags_on_a_seeded_template_are_400(coder, field):
    r = await coder.post("/emulator/templates", json={"name": "bad", **field})
    assert r.status_code == 400
    assert (await coder.get("/api/v2/organizations/coder/templates/bad")).status_code == 404
