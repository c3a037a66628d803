"""One agent's data is its own entry (issue 30.3): a far-future time an agent reports, or an unreadable answer
from its app, costs that agent's entry in list_agents, wait_for_agents and show_agents, never the call."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support import runner_agent

FAR = "9999-12-31T23:59:59-14:00"  # valid ISO 8601; year 10000 in UTC
APP_STATUS = "/api/v2/workspaceagents/me/app-status"


@pytest.fixture
def app_mode() -> str:
    """By path only: how apps are reached is not what these tests are about."""
    return "path"


async def report(coder: httpx.AsyncClient, token: str, **status: object) -> None:
    r = await coder.patch(APP_STATUS, json={"app_slug": "fleet", "message": "", "uri": "", **status},
                          headers={"Coder-Session-Token": token})
    assert r.status_code == 200, r.text


async def test_a_far_future_prompt_time_costs_only_its_agent(tools, coder, emulator):
    await runner_agent(coder, emulator, "good")
    token = await runner_agent(coder, emulator, "liar")
    await report(coder, token, state="working", message="Thinking")
    emulator.advance(1)
    await report(coder, token, state="idle", message="Waits",
                 uri=f"fleet-runner:needs-input?prompt=p-1&tool=Bash&input=ls&asked_at={FAR}")
    listed = await tools("list_agents")
    assert "error" not in listed, listed
    by_name = {a["name"]: a for a in listed["agents"]}
    assert set(by_name) == {"good", "liar"}
    assert by_name["liar"]["status"] == "needs_input"
    assert by_name["liar"]["pending"]["asked_at"].startswith("9999-12-31"), by_name["liar"]
    waited = await tools("wait_for_agents", agent_names=["good", "liar"], until=["needs_input"], timeout_s=0)
    assert "error" not in waited and waited["met"] == ["liar"], waited


async def fault(coder: httpx.AsyncClient, match: str, kind: str, **params: object) -> str:
    made = await coder.post("/emulator/faults", json={"match": match, "kind": kind, **params})
    assert made.status_code == 201, made.text
    rule_id: str = made.json()["id"]
    return rule_id


async def fired(coder: httpx.AsyncClient, rule: str) -> int:
    count: int = next(f["fired"] for f in (await coder.get("/emulator/faults")).json()["faults"] if f["id"] == rule)
    return count


async def test_a_runner_stating_a_far_future_time_costs_only_its_entry(tools, coder, emulator):
    await tools("create_agent", name="good", project="fleet-demo", spec="Tidy the README.")
    await runner_agent(coder, emulator, "liar")
    # A stand-in for liar's runner: its /state, as an agent that replaced its runner may answer it.
    state = {"state": "working", "since": FAR, "current_task": "Mine", "latest_output": "ok"}
    await fault(coder, "GET /@demo/liar.*/apps/fleet/state", "garbage", body=json.dumps(state))
    shown = await tools("show_agents", agent_names=["good", "liar"])
    assert "error" not in shown, shown
    good, liar = shown["agents"]
    assert good["name"] == "good" and good["status"] in ("busy", "idle") and good["error"] is None, good
    assert liar["name"] == "liar" and liar["status"] == "busy" and liar["current_task"] == "Mine", liar
    alone = await tools("show_agent", agent_name="liar")
    assert alone["agent"]["status"] == "busy" and alone["agent"]["status_since"] == "9999-12-31T23:59:59Z", alone


async def test_an_app_answering_a_page_costs_its_entry_at_once(tools, coder, emulator):
    for name in ("good", "broken"):
        await tools("create_agent", name=name, project="fleet-demo", spec="Tidy the README.")
    emulator.advance(30)
    page = await fault(coder, "GET /@demo/broken.*/apps/*", "garbage")  # 200, an HTML page for a body
    shown = await tools("show_agents", agent_names=["good", "broken"])
    assert "error" not in shown, shown
    good, broken = shown["agents"]
    assert good["status"] in ("busy", "idle") and good["error"] is None, good
    assert broken["status"] == "offline" and "cannot read" in broken["problem"], broken
    assert await fired(coder, page) == 1  # the app said it; asking again would only say it again
