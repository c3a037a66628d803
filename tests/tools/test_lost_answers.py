"""A write whose answer is lost: the fleet looks before answering, and never invites a duplicate.

`truncate` lets the write reach Coder (or the agent) and garbles its answer; a `status` fault answers
without reaching it. Either way the tool answers what really happened.
"""

from __future__ import annotations

from typing import Any

import httpx

from fleet_mcp.emulator import Emulator
from tests.support import Tools

LOST = {"kind": "truncate", "count": 1}  # the write happened; its answer did not arrive whole
REFUSED = {"kind": "status", "code": 503, "count": 1}  # the write never got there


async def make(tools: Tools, emulator: Emulator, name: str, spec: str) -> None:
    await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(30)


async def fault(coder: httpx.AsyncClient, match: str, rule: dict[str, Any]) -> None:
    assert (await coder.post("/emulator/faults", json={"match": match, **rule})).status_code == 201


async def copies(tools: Tools, name: str, text: str) -> int:
    log = await tools("show_agent_log", agent_name=name, page_size=100)
    return sum(m["content"] == text for m in log["messages"])


async def test_a_task_whose_answer_is_lost_is_sent_once(tools, emulator, coder):
    await make(tools, emulator, "lossy", "Warm up [[finish:1]]")
    await fault(coder, "POST /@*", LOST)
    sent = await tools("start_agent_task", agent_name="lossy", task_description="Only once [[finish:5]]")
    assert sent["agent_status"] == "busy" and sent["message"].startswith("Task sent")
    assert await copies(tools, "lossy", "Only once [[finish:5]]") == 1
    emulator.advance(30)
    await fault(coder, "POST /@*", REFUSED)
    refused = await tools.error("start_agent_task", agent_name="lossy", task_description="Not there")
    assert refused["error"] == "unavailable" and "not sent" in refused["message"]
    assert await copies(tools, "lossy", "Not there") == 0
    again = await tools("start_agent_task", agent_name="lossy", task_description="Not there")  # the retry asked for
    assert again["agent_status"] == "busy" and await copies(tools, "lossy", "Not there") == 1


async def test_a_cancel_whose_answer_is_lost_still_reports_the_stop(tools, emulator, coder):
    await make(tools, emulator, "stuck", "Forever [[hang]]")
    await coder.post("/emulator/clock", json={"per_request": 0.2})
    await fault(coder, "POST /@*", LOST)
    cancelled = await tools("cancel_agent_task", agent_name="stuck")
    assert cancelled["agent_status"] == "idle" and cancelled["message"] == "Task canceled."


async def test_builds_whose_answer_is_lost_are_not_doubled(tools, emulator, coder):
    await make(tools, emulator, "bye", "Work [[finish:1]]")
    ws_id = (await coder.get("/api/v2/users/me/workspace/bye")).json()["id"]
    await fault(coder, "POST /api/v2/workspaces/*/builds", LOST)
    stopped = (await tools("stop_agent", agent_name="bye"))["agent"]
    assert stopped["workspace_status"] in ("pending", "stopping")
    emulator.advance(30)
    await fault(coder, "POST /api/v2/workspaces/*/builds", REFUSED)
    refused = await tools.error("delete_agent", agent_name="bye")
    assert refused["error"] == "unavailable" and "nothing changed" in refused["message"]
    await fault(coder, "POST /api/v2/workspaces/*/builds", LOST)
    deleted = await tools("delete_agent", agent_name="bye")
    assert deleted["already_deleted"] is False
    builds = (await coder.get(f"/api/v2/workspaces/{ws_id}/builds")).json()
    assert [b["transition"] for b in builds] == ["delete", "stop", "start"]  # each build exactly once


async def test_two_deletes_at_once_both_succeed(tools, emulator, coder):
    import asyncio

    await make(tools, emulator, "twice", "Work [[finish:1]]")
    first, second = await asyncio.gather(tools("delete_agent", agent_name="twice"),
                                         tools("delete_agent", agent_name="twice"))
    assert {first["already_deleted"], second["already_deleted"]} == {False, True}
    ws_id = first["deleted_agent"]["workspace_id"]
    builds = (await coder.get(f"/api/v2/workspaces/{ws_id}/builds")).json()
    assert [b["transition"] for b in builds].count("delete") == 1


async def test_a_lost_create_adopts_only_its_own_workspace(tools, emulator, coder):
    from tests.support import create_workspace

    await fault(coder, "POST /api/v2/users/*/workspaces", LOST)
    mine = await tools("create_agent", name="adopted", project="fleet-demo", spec="Mine", role="operator")
    assert (mine["agent"]["spec"], mine["agent"]["role"]) == ("Mine", "operator")

    # Someone else made "twin" (another spec, another role) while this call's create never arrived.
    other = await create_workspace(coder, "twin", params={"fleet_mcp_managed": "true", "fleet_mcp_role": "manager",
                                                          "fleet_mcp_agent_spec": "Theirs"})
    assert other.status_code == 201
    await fault(coder, "POST /api/v2/users/*/workspaces", REFUSED)
    taken = await tools.error("create_agent", name="twin", project="fleet-demo", spec="Mine")
    assert taken["error"] == "conflict" and "not the agent this call asked for" in taken["message"]
    shown = (await tools("show_agent", agent_name="twin"))["agent"]
    assert (shown["spec"], shown["role"]) == ("Theirs", "manager")  # untouched, and nobody was told it was ours


async def test_a_refused_create_says_nothing_was_created_only_when_coder_says_so(tools, coder):
    await fault(coder, "POST /api/v2/users/*/workspaces", REFUSED)
    refused = await tools.error("create_agent", name="never", project="fleet-demo", spec="Go")
    assert refused["error"] == "unavailable" and "nothing was created" in refused["message"]
    assert (await coder.get("/api/v2/users/me/workspace/never")).status_code == 404


async def test_an_answer_that_never_arrived_is_asked_again_only_for_its_own_prompt(tools, emulator, coder):
    await make(tools, emulator, "asker", "Run the tests [[permission]] [[finish:2]]")
    shown = (await tools("show_agent", agent_name="asker"))["agent"]
    assert shown["status"] == "needs_input"
    asked = shown["pending"]["prompt_id"]
    await fault(coder, "POST /@*", REFUSED)
    refused = await tools.error("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")
    assert refused["error"] == "unavailable" and f"prompt {asked} still waits" in refused["message"]
    assert (await tools("show_agent", agent_name="asker"))["agent"]["pending"]["prompt_id"] == asked
    again = await tools("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")  # the retry asked for
    assert again["prompt_id"] == asked and again["agent_status"] in ("busy", "idle")
    twice = await tools.error("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")
    assert twice["error"] == "conflict"  # a second retry, or a second orchestrator: never lands again


async def test_an_answer_whose_reply_is_lost_is_read_back_as_landed(tools, emulator, coder):
    await make(tools, emulator, "asker", "Run the tests [[permission]] [[finish:2]]")
    asked = (await tools("show_agent", agent_name="asker"))["agent"]["pending"]["prompt_id"]
    await fault(coder, "POST /@*", LOST)
    answered = await tools("answer_agent", agent_name="asker", prompt_id=asked, decision="allow")
    assert answered["prompt_id"] == asked and answered["agent_status"] in ("busy", "idle")  # no "try again"
    fired = (await coder.get("/emulator/faults")).json()["faults"]
    assert [f["fired"] for f in fired] == [1]
