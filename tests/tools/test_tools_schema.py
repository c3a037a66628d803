"""One snapshot per tool (name, schemas, annotations): a schema change is deliberate and shows as one file's diff.

After an intended change: `FLEET_MCP_UPDATE_SNAPSHOTS=1 python -m pytest tests/tools/test_tools_schema.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from support import TOOLS

SNAPSHOTS = Path(__file__).parent / "snapshots"


async def listed(tools) -> list[dict]:
    return [
        {"name": t.name, "title": t.title, "description": t.description,
         "annotations": t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else None,
         "inputSchema": t.input_schema, "outputSchema": t.output_schema}
        for t in await tools.client.list_tools()
    ]


async def test_each_tool_matches_its_snapshot(tools):
    current = {t["name"]: t for t in await listed(tools)}
    if os.environ.get("FLEET_MCP_UPDATE_SNAPSHOTS"):
        for old in SNAPSHOTS.glob("*.json"):
            old.unlink()
        for name, tool in current.items():
            (SNAPSHOTS / f"{name}.json").write_text(json.dumps(tool, indent=2, sort_keys=True) + "\n")
    saved = {p.stem: json.loads(p.read_text()) for p in SNAPSHOTS.glob("*.json")}
    assert set(saved) == set(current), "tools added or removed: update the snapshots deliberately"
    for name, tool in current.items():
        assert tool == saved[name], f"{name}'s schema changed: update its snapshot deliberately"


async def test_every_tool_declares_its_hints(tools):
    for tool in await listed(tools):
        hints = tool["annotations"]
        assert {"readOnlyHint", "destructiveHint", "idempotentHint"} <= set(hints), tool["name"]
        assert tool["title"] and tool["description"] and tool["outputSchema"]
    assert {t["name"] for t in await listed(tools)} == TOOLS


async def test_an_unknown_tool_is_a_bad_request_listing_the_tools(tools):
    error = await tools.error("create_agnet", name="x")
    assert error["error"] == "bad_request" and "create_agnet" in error["message"]
    assert set(error["details"]["tools"]) == TOOLS
    assert "try again" not in error["message"].lower()
