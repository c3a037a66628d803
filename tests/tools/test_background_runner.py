"""MCP Tasks on runner agents: an agent's permission prompt reaches the user as the task's form, and their
answer (tasks/update) reaches that prompt; a task handed out with start_agent_task wakes the caller when its
turn is over. Real Claude Code through `fleet-mcp runner`, the model scripted (real processes: `system`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runners import disk, needs_sdk, runner_fleet
from tests.tasks_client import TasksClient

pytestmark = [pytest.mark.system, needs_sdk]


async def test_a_prompt_goes_to_the_user_and_their_answer_to_the_agent(conformance):
    asked: list[tuple[str, dict[str, Any]]] = []

    def user(key: str, form: dict[str, Any]) -> dict[str, Any]:
        asked.append((key, form))
        return {"action": "accept", "content": {"allow": len(asked) == 1, "message": "" if len(asked) == 1 else
                                                "Not on this machine."}}

    tasks = TasksClient(answer=user, pause_s=0.2)
    async with runner_fleet(conformance, extensions=[tasks.extension()]) as (tools, coder):
        await tools("create_agent", name="bg-ask", project="fleet-demo", spec="Run it [[permission]]")
        waited = await tools("wait_for_agents", agent_names=["bg-ask"], timeout_s=90)
        assert waited["met"] == ["bg-ask"] and waited["agents"][0]["last_turn"] == "succeeded"
        assert (await disk(coder, "bg-ask") / "permitted.txt").is_file()  # allowed by the user: really run
        key, form = asked[0]
        _, prompt_id, digest = key.split("/")
        assert key.startswith("bg-ask/") and prompt_id and digest  # bound to the prompt as the form showed it
        assert form["mode"] == "form" and "bg-ask" in form["message"] and "Bash" in form["message"]
        assert "command: sh -c 'echo permitted > permitted.txt'" in form["message"]  # the whole input, shown
        schema = form["requestedSchema"]
        assert schema["properties"]["allow"]["type"] == "boolean" and schema["required"] == ["allow"]
        statuses = [p["status"] for p in tasks.polls]
        assert "input_required" in statuses and statuses[-1] == "completed"
        assert statuses[statuses.index("input_required") + 1:].count("input_required") <= 1  # answered once
        again = await tools.error("answer_agent", agent_name="bg-ask", prompt_id=prompt_id, digest=digest,
                                  decision="deny")
        assert again["error"] == "conflict" and again["details"]["answered"]["decision"] == "allow"

        handed = await tools("start_agent_task", agent_name="bg-ask", task_description="Again [[permission]]")
        assert len(tasks.created) == 2  # handed out, and woken when the turn was over
        assert "turn is over" in handed["message"] and handed["agent_status"] == "idle"
        assert len(asked) == 2 and (await disk(coder, "bg-ask") / "permitted.txt").read_text().count("\n") <= 1
