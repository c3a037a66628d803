"""Reviewing work is the runner's: on AgentAPI agents `changes` is null with its reason, show_agent_diff and
result_schema are refused with `bad_request`, and bad input is refused before any agent is asked."""

from __future__ import annotations

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


async def test_agentapi_agents_say_they_record_no_changes_and_refuse_typed_tasks(tools, emulator):
    await tools("create_agent", name="screen", project="fleet-demo", spec="Write it [[finish:1]]")
    emulator.advance(30)
    result = await tools("get_agent_result", agent_name="screen")
    assert result["changes"] is None and result["structured"] is None
    assert result["changes_unavailable"] == "AgentAPI agents record no changes (the runner does)."
    glance = (await tools("show_agents", agent_names=["screen"]))["agents"][0]
    assert glance["last_turn"] == "succeeded" and glance["changes_summary"] is None and glance["last_turn_cost_usd"] is None

    diff = await tools.error("show_agent_diff", agent_name="screen")
    assert diff["error"] == "bad_request" and "runner" in diff["message"] and diff["details"]["driver"] == "agentapi"
    typed = await tools.error("start_agent_task", agent_name="screen", task_description="Judge", result_schema=SCHEMA)
    assert typed["error"] == "bad_request" and typed["details"]["field"] == "result_schema"
    assert (await tools("show_agent", agent_name="screen"))["agent"]["status"] == "idle"  # nothing was sent
    refused = await tools.error("create_agent", name="typed", project="fleet-demo", spec="Judge", result_schema=SCHEMA)
    assert refused["error"] == "bad_request" and refused["details"]["field"] == "result_schema"
    assert [a["name"] for a in (await tools("list_agents"))["agents"]] == ["screen"]  # nothing was created


async def test_bad_diff_and_schema_input_is_refused_up_front(tools, emulator):
    await tools("create_agent", name="quiet", project="fleet-demo", spec="Wait [[finish:1]]")
    emulator.advance(30)
    for path in ("../secrets", "/etc/passwd", "a/../../b", "~/x", "bad\x00name"):
        refused = await tools.error("show_agent_diff", agent_name="quiet", path=path)
        assert refused["error"] == "bad_request" and refused["details"]["field"] == "path", path
    assert (await tools.error("show_agent_diff", agent_name="quiet", scope="everything"))["error"] == "bad_request"
    assert (await tools.error("show_agent_diff", agent_name="quiet", page=0))["error"] == "bad_request"
    assert (await tools.error("show_agent_diff", agent_name="nobody"))["error"] == "not_found"
    for schema in ({"type": 5}, {"properties": {"a": {"minimum": "one"}}}, {"enum": "x" * 17_000}):
        refused = await tools.error("start_agent_task", agent_name="quiet", task_description="Judge",
                                    result_schema=schema)
        assert refused["error"] == "bad_request" and refused["details"]["field"] == "result_schema", schema
    not_object = await tools.error("start_agent_task", agent_name="quiet", task_description="x", result_schema=[1])
    assert not_object["error"] == "bad_request"
