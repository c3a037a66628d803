"""Orchestrating without polling: wait on a group, glance at many, answer, read results, queue or interrupt.

Through a real MCP client against the emulator; time passes on its virtual clock as the fleet polls.
"""

from __future__ import annotations

import asyncio

import pytest

from fleet_mcp.emulator import Emulator
from tests.support import Tools

PER_POLL = {"per_request": 0.5}  # virtual seconds that pass with each request the fleet makes


async def make(tools: Tools, emulator: Emulator, *agents: tuple[str, str], settle: float = 30) -> None:
    for name, spec in agents:
        await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(settle)


def listings(emulator: Emulator) -> int:
    return emulator.backend.requests["GET /api/v2/workspaces"]


async def test_wait_for_all_to_finish(tools, emulator, coder):
    await make(tools, emulator, ("w-one", "One [[finish:2]]"), ("w-two", "Two [[finish:4]]"), settle=5)
    await coder.post("/emulator/clock", json=PER_POLL)
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done, total, message):
        seen.append((done, total, message))

    answer = await tools("wait_for_agents", progress=progress, agent_names=["w-one", "w-two"], timeout_s=60)
    assert answer["timed_out"] is False and sorted(answer["met"]) == ["w-one", "w-two"]
    assert {a["status"] for a in answer["agents"]} == {"idle"}
    assert all(a["last_turn"] == "succeeded" for a in answer["agents"])
    assert seen and all("waiting" in (m or "") for _, _, m in seen)  # progress reached the client
    assert (await tools("list_agents"))["agents"][0]["status"] == "idle"


async def test_wait_for_any_ends_on_the_first(tools, emulator, coder):
    await make(tools, emulator, ("quick", "Quick [[finish:1]]"), ("stuck", "Forever [[hang]]"), settle=5)
    await coder.post("/emulator/clock", json=PER_POLL)
    answer = await tools("wait_for_agents", agent_names=["quick", "stuck"], mode="any", timeout_s=60)
    assert answer["met"] == ["quick"] and answer["timed_out"] is False
    assert {a["name"]: a["status"] for a in answer["agents"]}["stuck"] == "busy"


async def test_wait_times_out_with_each_status(tools, emulator):
    await make(tools, emulator, ("hanger", "Forever [[hang]]"))
    answer = await tools("wait_for_agents", agent_names=["hanger"], until="idle", timeout_s=0.2)
    assert answer["timed_out"] is True and answer["met"] == []
    assert answer["agents"] == [{"name": "hanger", "status": "busy", "met": False, "status_since":
                                 answer["agents"][0]["status_since"], "last_turn": None, "last_turn_error": None,
                                 "pending": None, "problem": None}]
    assert "Timed out" in answer["message"]


async def test_wait_ends_on_needs_input_and_the_answer_moves_it_on(tools, emulator, coder):
    await make(tools, emulator, ("asker", "Run the tests [[permission]] [[finish:2]]"), settle=5)
    await coder.post("/emulator/clock", json=PER_POLL)
    answer = await tools("wait_for_agents", agent_names=["asker"], until=["idle", "needs_input"], timeout_s=60)
    assert answer["agents"][0]["status"] == "needs_input" and answer["met"] == ["asker"]
    assert answer["agents"][0]["pending"]["prompt_id"] is None  # AgentAPI's screen is read live, not listed
    shown = (await tools("show_agent", agent_name="asker"))["agent"]
    assert shown["status"] == "needs_input" and shown["driver"] == "agentapi"
    asked = shown["pending"]["prompt_id"]
    assert asked.startswith("screen-") and shown["pending"]["tool"] == "screen"
    answered = await tools("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")
    assert answered["agent_status"] in ("busy", "idle")
    done = await tools("wait_for_agents", agent_names=["asker"], timeout_s=60)
    assert done["agents"][0]["last_turn"] == "succeeded"
    refused = await tools.error("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")
    assert refused["error"] == "conflict" and "nothing waits now" in refused["message"]


async def test_a_denied_permission_ends_the_turn_as_failed(tools, emulator, coder):
    await make(tools, emulator, ("denied", "Run the tests [[permission]]"), settle=5)
    await coder.post("/emulator/clock", json=PER_POLL)
    await tools("wait_for_agents", agent_names=["denied"], until="needs_input", timeout_s=60)
    asked = (await tools("show_agent", agent_name="denied"))["agent"]["pending"]["prompt_id"]
    await tools("answer_agent", agent_name="denied", prompt_id=asked, decision="deny")
    done = await tools("wait_for_agents", agent_names=["denied"], until=["idle", "failed"], timeout_s=60)
    assert done["agents"][0]["last_turn"] == "failed" and "denied" in done["agents"][0]["last_turn_error"].lower()
    result = await tools("get_agent_result", agent_name="denied")
    assert result["outcome"] == "failed" and result["driver"] == "agentapi"


@pytest.mark.parametrize("bad", [{"agent_names": []}, {"agent_names": ["a"] * 101},
                                 {"agent_names": ["x"], "until": "asleep"}, {"agent_names": ["x"], "timeout_s": -1},
                                 {"agent_names": ["x"], "timeout_s": 1801}, {"agent_names": ["x"], "mode": "some"}])
async def test_wait_refuses_bad_arguments(tools, bad):
    assert (await tools.error("wait_for_agents", **bad))["error"] == "bad_request"


async def test_an_unknown_name_is_not_found_before_any_waiting(tools, emulator):
    await make(tools, emulator, ("known", "Work [[hang]]"))
    emulator.backend.requests.clear()
    error = await tools.error("wait_for_agents", agent_names=["known", "ghost"], timeout_s=600)
    assert error["error"] == "not_found" and error["details"]["agent_names"] == ["ghost"]
    assert listings(emulator) == 1
    outsider = await tools.error("wait_for_agents", agent_names=["hand-made"], timeout_s=600)
    assert outsider["error"] == "not_found"  # a person's own workspace is never an agent


async def test_waits_share_one_listing_per_interval(emulator, conformance):
    import httpx
    from fastmcp import Client

    from fleet_mcp.server import build_server
    from tests.support import CheckedTransport, Tools, fleet_settings

    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    settings = fleet_settings(wait_poll_interval_s=0.2)
    async with Client(build_server(settings, transport=transport)) as client:
        tools = Tools(client)
        await make(tools, emulator, *[(f"s{i}", "Forever [[hang]]") for i in range(5)])
        emulator.backend.requests.clear()
        waits = [tools("wait_for_agents", agent_names=[f"s{i % 5}"], timeout_s=1.0) for i in range(10)]
        answers = await asyncio.gather(*waits)
    assert all(a.get("timed_out") for a in answers), [a for a in answers if not a.get("timed_out")]
    # Ten waits of one second at 0.2 s: one fresh listing per call to check its names, then about five shared
    # polls, not fifty.
    assert 10 <= listings(emulator) <= 10 + 8, listings(emulator)


async def test_polls_start_one_interval_apart_however_slow_the_listing(emulator, conformance):
    import httpx
    from fastmcp import Client

    from fleet_mcp.server import build_server
    from tests.support import CheckedTransport, Tools, fleet_settings

    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with Client(build_server(fleet_settings(wait_poll_interval_s=0.2), transport=transport)) as client:
        tools = Tools(client)
        await make(tools, emulator, ("slowpoke", "Forever [[hang]]"))
        emulator.control.faults.add({"match": "GET /api/v2/workspaces", "kind": "latency", "seconds": 0.1})
        emulator.backend.requests.clear()
        answer = await tools("wait_for_agents", agent_names=["slowpoke"], timeout_s=1.0)
    assert answer["timed_out"]
    # Listings asked at 0, 0.2, ... 1.0 s: six, each answered 0.1 s later. Polls an interval after each
    # answer would have asked four (0, 0.3, 0.6, 0.9): a change would wait an interval and a half.
    assert listings(emulator) >= 5, listings(emulator)


async def test_a_cancelled_wait_stops_polling(tools, emulator):
    await make(tools, emulator, ("idler", "Forever [[hang]]"))
    emulator.backend.requests.clear()
    waiting = asyncio.create_task(tools("wait_for_agents", agent_names=["idler"], timeout_s=600))
    while listings(emulator) < 3:
        await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.1)  # ten poll intervals: a wait still running would list again
    stopped_at = listings(emulator)
    await asyncio.sleep(0.1)
    assert listings(emulator) == stopped_at


async def test_show_agents_glances_at_many(tools, emulator):
    await make(tools, emulator, ("g-done", "Done soon [[finish:1]]"), ("g-busy", "Forever [[hang]]"), settle=60)
    answer = await tools("show_agents", agent_names=["g-done", "g-busy", "ghost", "hand-made"])
    by = {a["name"]: a for a in answer["agents"]}
    assert by["g-done"]["status"] == "idle" and by["g-done"]["latest_output"]
    assert len(by["g-done"]["latest_output"]) <= 300
    assert by["g-busy"]["status"] == "busy" and by["g-busy"]["status_source"] == "app status"  # AgentAPI: 1 request
    assert by["ghost"]["error"]["error"] == "not_found" and by["ghost"]["status"] is None
    assert by["hand-made"]["error"]["error"] == "not_found"
    assert (await tools.error("show_agents", agent_names=["a"] * 51))["error"] == "bad_request"


async def test_results_of_a_finished_a_failed_and_an_interrupted_turn(tools, emulator, coder):
    await make(tools, emulator, ("fine", "Fix it [[finish:1]] [[pr]]"), ("broken", "Fix it [[fail]] [[finish:1]]"),
               ("halted", "Forever [[hang]]"), settle=60)
    fine = await tools("get_agent_result", agent_name="fine")
    assert fine["outcome"] == "succeeded" and "/pull/" in fine["pull_request_url"]
    assert fine["truncated"] is False and fine["text"] and fine["turn_cost_usd"] is None
    broken = await tools("get_agent_result", agent_name="broken")
    assert broken["outcome"] == "failed"
    assert (await tools.error("get_agent_result", agent_name="halted"))["error"] == "bad_request"
    await coder.post("/emulator/clock", json={"per_request": 0.2})
    await tools("cancel_agent_task", agent_name="halted")
    shown = (await tools("list_agents", status="idle"))["agents"]
    assert {a["name"]: a["last_turn"] for a in shown}["halted"] == "interrupted"


async def test_if_busy_queue_needs_the_runner_and_interrupt_sends_after_stopping(tools, emulator, coder):
    await make(tools, emulator, ("busy-one", "Forever [[hang]]"))
    assert (await tools.error("start_agent_task", agent_name="busy-one", task_description="Next"))["error"] == \
        "conflict"
    queued = await tools.error("start_agent_task", agent_name="busy-one", task_description="Next", if_busy="queue")
    assert queued["error"] == "bad_request" and "runner" in queued["message"]
    await coder.post("/emulator/clock", json={"per_request": 0.2})
    sent = await tools("start_agent_task", agent_name="busy-one", task_description="Instead [[finish:1]]",
                       if_busy="interrupt")
    assert sent["agent_status"] == "busy"
    log = await tools("show_agent_log", agent_name="busy-one")
    assert log["messages"][1]["content"] == "Instead [[finish:1]]" or \
        any(m["content"] == "Instead [[finish:1]]" for m in log["messages"])
