"""Drift guards: a Coder whose workspace answers leave app statuses out is said so, never read as idle."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from fleet_mcp.coder.schemas import Workspace

SPEC = "Tidy the README."


async def slim(coder: httpx.AsyncClient, on: bool = True) -> None:
    r = await coder.post("/emulator/answers", json={"app_statuses": not on})
    assert r.json() == {"app_statuses": not on}


async def test_a_listing_without_app_statuses_is_unknown_not_idle(tools, emulator, coder):
    await tools("create_agent", name="quiet", project="fleet-demo", spec=SPEC)
    emulator.advance(600)  # long enough for the scripted first turn to be over
    seen = (await tools("list_agents"))["agents"][0]
    assert (seen["status"], seen["status_source"]) == ("idle", "app status")
    await slim(coder)
    seen = (await tools("list_agents"))["agents"][0]
    assert (seen["status"], seen["status_source"]) == ("unknown", "no app statuses"), seen
    assert (await tools("list_agents", status="idle"))["agents"] == []
    waited = await tools("wait_for_agents", agent_names=["quiet"], until="idle", timeout_s=0.2)
    assert waited["timed_out"] and waited["agents"][0]["status"] == "unknown", waited
    shown = (await tools("show_agent", agent_name="quiet"))["agent"]  # asks the agent itself
    assert (shown["status"], shown["status_source"]) == ("idle", "driver"), shown
    await slim(coder, on=False)
    assert (await tools("list_agents"))["agents"][0]["status"] == "idle"


def test_absent_status_fields_differ_from_empty_ones():
    build: dict[str, Any] = {"id": "b", "resources": [{"id": "r", "agents": [{"id": "a", "name": "main", "apps": [
        {"id": "p", "slug": "ccw"}]}]}]}
    assert not msgspec.convert({"id": "w", "name": "w", "latest_build": build}, Workspace).sends_app_statuses
    assert msgspec.convert({"id": "w", "name": "w", "latest_build": build, "latest_app_status": None,
                            "sends_app_statuses": False}, Workspace).sends_app_statuses
    build["resources"][0]["agents"][0]["apps"][0]["statuses"] = []
    assert msgspec.convert({"id": "w", "name": "w", "latest_build": build}, Workspace).sends_app_statuses
