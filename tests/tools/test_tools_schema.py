"""A snapshot of every tool's name, schemas and annotations: a schema change is deliberate.

After an intended change: `FLEET_MCP_UPDATE_SNAPSHOTS=1 python -m pytest tests/tools/test_tools_schema.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "snapshots" / "tools.json"


async def listed(tools) -> list[dict]:
    return [
        {"name": t.name, "title": t.title, "description": t.description,
         "annotations": t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else None,
         "inputSchema": t.input_schema, "outputSchema": t.output_schema}
        for t in await tools.client.list_tools()
    ]


async def test_tools_list_matches_the_snapshot(tools):
    current = await listed(tools)
    if os.environ.get("FLEET_MCP_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    assert current == json.loads(SNAPSHOT.read_text()), "tool schemas changed: update the snapshot deliberately"


async def test_every_tool_declares_its_hints(tools):
    for tool in await listed(tools):
        hints = tool["annotations"]
        assert {"readOnlyHint", "destructiveHint", "idempotentHint"} <= set(hints), tool["name"]
        assert tool["title"] and tool["description"] and tool["outputSchema"]
    names = {t["name"] for t in await listed(tools)}
    assert names == {"create_agent", "list_agents", "show_agent", "show_agent_task_history", "delete_agent",
                     "start_agent_task", "cancel_agent_task", "list_agent_roles", "list_agent_projects",
                     "show_agent_log"}
