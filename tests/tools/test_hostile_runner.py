"""Items bounded, not only bytes (issue 30.2): a runner answering a list of a million items within the byte cap
costs its own entry, told at once from the answer's shape, and get_agent_result reads the one result it shows.

The agent stands in for its runner here (it can replace it on the app's port): emulator fault rules answer
its routes with what it chose. Wall-clock figures for these bodies are bench/hostile.py's; here the outcome.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support import runner_agent

MiB = 1 << 20


@pytest.fixture
def app_mode() -> str:
    """By path only: how apps are reached is not what these tests are about."""
    return "path"


def flood(head: str, tail: str, size: int) -> str:
    """`head`, `{}` repeated (comma-separated) to about `size` characters, `tail`: millions of JSON values."""
    return head + ",".join(["{}"] * ((size - len(head) - len(tail)) // 3)) + tail


async def stand_in(coder: httpx.AsyncClient, agent: str, route: str, body: str) -> None:
    made = await coder.post("/emulator/faults", json={"match": f"GET /@demo/{agent}.*/apps/fleet/{route}",
                                                      "kind": "garbage", "body": body})
    assert made.status_code == 201, made.text


async def test_a_state_of_a_million_items_costs_only_its_agents_entry(tools, coder, emulator):
    await tools("create_agent", name="good", project="fleet-demo", spec="Tidy the README.")
    await runner_agent(coder, emulator, "flood")
    # 350,000 answered prompts, in the 1 MiB a state may take: each would become a model before any list's
    # max_length is checked.
    await stand_in(coder, "flood", "state", flood('{"state": "idle", "answered": [', "]}", MiB - 100))
    shown = await tools("show_agents", agent_names=["good", "flood"])
    assert "error" not in shown, shown
    good, flooded = shown["agents"]
    assert good["name"] == "good" and good["error"] is None, good
    assert flooded["name"] == "flood" and "100,000 JSON values" in flooded["problem"], flooded
    assert flooded["error"]["details"]["agent_name"] == "flood", flooded


async def test_a_conversation_of_a_million_items_is_refused_unread(tools, coder, emulator):
    await runner_agent(coder, emulator, "chatty")
    await stand_in(coder, "chatty", "state", json.dumps({"state": "idle"}))
    await stand_in(coder, "chatty", "messages", flood('{"messages": [', "]}", 4 * MiB))
    log = await tools("show_agent_log", agent_name="chatty")
    assert "100,000 JSON values" in log["message"] and "chatty" in log["message"], log


async def test_get_agent_result_reads_the_one_result_it_shows(tools, coder, emulator):
    await runner_agent(coder, emulator, "done")
    await stand_in(coder, "done", "state", json.dumps({"state": "idle", "turns": 300, "cost_usd": 1.5}))
    last = {"task": "Only this one", "text": "Done.", "subtype": "success", "total_cost_usd": 0.25,
            "finished_at": "2026-11-26T12:00:00Z"}
    await stand_in(coder, "done", "result", json.dumps({"result": last}))
    await stand_in(coder, "done", "results", flood('{"results": [', "]}", 4 * MiB))  # never asked for
    result = await tools("get_agent_result", agent_name="done")
    assert (result["task"], result["outcome"], result["turn_cost_usd"]) == ("Only this one", "succeeded", 0.25)
    assert result["total_cost_usd"] == 1.5  # the runner's own sum over all 300 turns, not only those it keeps
