"""The control API: reset, seed, clock, request counter, bulk fleets."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from fleet_mcp.emulator.control import AgentControl, ControlAPI
from tests.support import TOKEN, asgi_request, client_for, create_workspace


async def test_demo_seed(coder):
    mine = (await coder.get("/api/v2/workspaces", params={"q": "owner:me"})).json()["workspaces"]
    assert sorted(w["name"] for w in mine) == ["dev-box", "hand-made"]
    hand_made = next(w for w in mine if w["name"] == "hand-made")
    assert hand_made["template_name"] == "fleet-demo" and hand_made["latest_build"]["status"] == "running"
    r = await coder.get(f"/api/v2/workspacebuilds/{hand_made['latest_build']['id']}/parameters")
    assert {p["name"]: p["value"] for p in r.json()}["fleet_mcp_managed"] == "false"
    managed = (await coder.get("/api/v2/workspaces", params={"q": "owner:me param:fleet_mcp_managed=true"})).json()
    assert managed["count"] == 0


async def test_reset_empty_and_demo(coder):
    await create_workspace(coder, "temp")
    r = await coder.post("/emulator/reset", json={"seed": "empty"})
    assert r.status_code == 200
    me = await coder.get("/api/v2/users/me")  # the site owner stays: the printed token works
    assert me.status_code == 200 and me.json()["username"] == "demo"
    assert (await coder.get("/api/v2/templates")).json() == []
    assert (await coder.get("/api/v2/workspaces")).json()["count"] == 0
    await coder.post("/emulator/reset", json={"seed": "demo"})
    names = [w["name"] for w in (await coder.get("/api/v2/workspaces", params={"q": "owner:me"})).json()["workspaces"]]
    assert "temp" not in names and "dev-box" in names
    assert (await coder.post("/emulator/reset", json={"seed": "nope"})).status_code == 400


async def test_clock_read_and_advance(coder):
    before = (await coder.get("/emulator/clock")).json()
    assert before["virtual"] is True
    after = (await coder.post("/emulator/clock", json={"seconds": 90})).json()
    assert after["elapsed"] == before["elapsed"] + 90
    assert (await coder.post("/emulator/clock", json={"seconds": -1})).status_code == 400


async def test_request_counter_by_route_pattern(coder):
    await coder.delete("/emulator/requests")
    ws = (await create_workspace(coder, "counted")).json()
    await coder.get(f"/api/v2/workspaces/{ws['id']}")
    await coder.get(f"/api/v2/workspaces/{ws['id']}")
    counts = (await coder.get("/emulator/requests")).json()
    assert counts["routes"]["GET /api/v2/workspaces/{workspace}"] == 2
    assert counts["routes"]["POST /api/v2/users/{user}/workspaces"] == 1
    assert counts["total"] == 4  # the template lookup too
    await coder.delete("/emulator/requests")
    assert (await coder.get("/emulator/requests")).json()["total"] == 0


async def test_bulk_fleet(coder):
    before = (await coder.get("/emulator/clock")).json()["elapsed"]
    r = await coder.post("/emulator/fleet", json={"count": 25})
    assert r.json()["created"] == 25
    assert (await coder.get("/emulator/clock")).json()["elapsed"] == before + 30  # as docs/emulator.md says
    page = (await coder.get("/api/v2/workspaces", params={
        "q": "owner:me param:fleet_mcp_managed=true status:running", "limit": 10})).json()
    assert page["count"] == 25 and len(page["workspaces"]) == 10


async def test_durations_are_settings(coder, emulator):
    defaults = (await coder.get("/emulator/timings")).json()
    assert defaults["start_build"] > 0 and set(defaults) >= {"job_queue", "agent_connect", "app_healthy"}
    r = await coder.post("/emulator/timings", json={"job_queue": 0, "start_build": 20})
    assert r.json()["start_build"] == 20
    ws = (await create_workspace(coder, "slow-build")).json()
    emulator.advance(10)
    assert (await coder.get(f"/api/v2/workspaces/{ws['id']}")).json()["latest_build"]["status"] == "starting"
    emulator.advance(15)
    assert (await coder.get(f"/api/v2/workspaces/{ws['id']}")).json()["latest_build"]["status"] == "running"
    assert (await coder.post("/emulator/timings", json={"warp": 1})).status_code == 400


async def test_durations_set_on_one_emulator_stay_in_it(conformance):
    """A test's slow builds (`POST /emulator/timings`) must not slow every later emulator of the process: they
    all start from the same `REAL_TIME`."""
    from fleet_mcp.emulator import REAL_TIME, Emulator

    before = dataclasses.asdict(REAL_TIME)
    slowed, other = (Emulator(token=TOKEN, virtual=False, timings=REAL_TIME) for _ in range(2))
    async with client_for(slowed, conformance) as coder:
        assert (await coder.post("/emulator/timings", json={"start_build": 60})).json()["start_build"] == 60
    async with client_for(other, conformance) as coder:
        assert (await coder.get("/emulator/timings")).json() == before
    assert dataclasses.asdict(REAL_TIME) == before


async def test_time_can_pass_per_request(coder):
    before = (await coder.get("/emulator/clock")).json()["elapsed"]
    await coder.post("/emulator/clock", json={"per_request": 2})
    await coder.get("/api/v2/users/me")
    await coder.get("/api/v2/users/me")
    after = (await coder.get("/emulator/clock")).json()
    assert after["per_request"] == 2 and after["elapsed"] == before + 4



async def test_a_real_time_emulator_reads_wall_time_after_its_seed_and_every_reset():
    from datetime import UTC, datetime

    import httpx

    from fleet_mcp.emulator import REAL_TIME, Emulator

    def when(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    emulator = Emulator(virtual=False, timings=REAL_TIME)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                                 headers={"Coder-Session-Token": emulator.token}) as coder:
        for _ in range(2):  # the seed's settling is history: neither it nor a reset moves the clock ahead
            now = when((await coder.get("/emulator/clock")).json()["now"])
            assert abs((now - datetime.now(UTC)).total_seconds()) < 2
            hand_made = (await coder.get("/api/v2/users/demo/workspace/hand-made")).json()
            assert hand_made["latest_build"]["status"] == "running"  # settled all the same
            assert when(hand_made["created_at"]) < when(hand_made["latest_build"]["updated_at"]) <= now
            await coder.post("/emulator/reset", json={"seed": "demo"})


def test_role_prompts_read_as_english():
    from fleet_mcp.emulator.coder.seed import ROLE_PROMPTS

    assert ROLE_PROMPTS["manager"].startswith("You are an Engineering Manager.")
    assert ROLE_PROMPTS["operator"].startswith("You are an Operations Engineer.")
    assert ROLE_PROMPTS["coder"].startswith("You are a Software Engineer.")


async def test_each_control_action_is_a_method_callable_alone(emulator):
    """A route table over one class (moto's urls.py + responses.py): an action answers without the app."""
    api = ControlAPI(emulator.control, emulator.proxy)
    before = emulator.backend.now()
    answer = await api.clock(asgi_request("POST", "/emulator/clock", {"seconds": 90}))
    assert json.loads(bytes(answer.body))["now"] == (before + timedelta(seconds=90)).isoformat()
    assert json.loads(bytes((await api.rate_limit(asgi_request("POST", "/emulator/rate-limit", {"enabled": False}))).body)) \
        == {"enabled": False} and not emulator.backend.rate_limit
    agents = AgentControl(emulator.backend, emulator.claude, emulator.runners)
    token = agents.on_workspace(agents.token)
    missing = await token(asgi_request("GET", "/emulator/agents/nope/token", path_params={"workspace": "nope"}))
    assert (missing.status_code, json.loads(bytes(missing.body))) == (404, {"error": "no workspace demo/nope"})
    found = await token(asgi_request("GET", "/emulator/agents/hand-made/token", path_params={"workspace": "hand-made"}))
    assert found.status_code == 200 and json.loads(bytes(found.body))["agent_name"]
