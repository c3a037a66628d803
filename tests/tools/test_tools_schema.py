"""One snapshot per tool (name, schemas, annotations): a schema change is deliberate and shows as one file's diff.

After an intended change: `FLEET_MCP_UPDATE_SNAPSHOTS=1 python -m pytest tests/tools/test_tools_schema.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import TOOLS, Tools

SNAPSHOTS = Path(__file__).parent / "snapshots"


async def listed(tools: Tools) -> list[dict[str, Any]]:
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


def test_optional_scalars_are_written_as_a_type_list():
    from fleet_mcp.registry import nullable_as_type

    optional = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "description": "d"}
    assert nullable_as_type(optional) == {"type": ["string", "null"], "default": None, "description": "d"}
    status = {"anyOf": [{"enum": ["idle", "busy"], "type": "string"}, {"type": "null"}]}
    assert nullable_as_type(status) == {"enum": ["idle", "busy", None], "type": ["string", "null"]}
    nested = {"properties": {"n": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}}}
    assert nullable_as_type(nested) == {"properties": {"n": {"type": ["integer", "null"], "minimum": 1}}}
    for kept in ({"anyOf": [{"$ref": "#/$defs/Agent"}, {"type": "null"}]},  # a model: its rules stay a branch
                 {"anyOf": [{"type": "string"}, {"type": "integer"}]},  # not an optional
                 {"anyOf": [{"const": "x", "type": "string"}, {"type": "null"}]}):
        assert nullable_as_type(kept) == kept


async def test_every_answer_still_matches_its_schema(tools, emulator):
    """The validator a client runs (the mcp SDK's) accepts real answers, nulls included."""
    import jsonschema

    schemas = {t["name"]: t["outputSchema"] for t in await listed(tools)}
    await tools("create_agent", name="schema", project="fleet-demo", spec="Look [[finish:1]]")
    emulator.advance(60)
    answers = {"show_agent": await tools("show_agent", agent_name="schema"),
               "list_agents": await tools("list_agents"),
               "show_agents": await tools("show_agents", agent_names=["schema", "nobody"]),
               "wait_for_agents": await tools("wait_for_agents", agent_names=["schema"], timeout_s=0)}
    for name, answer in answers.items():
        jsonschema.validate(answer, schemas[name])
    assert answers["show_agents"]["agents"][1]["error"]["error"] == "not_found"
    assert answers["show_agent"]["agent"]["problem"] is None  # a null where the schema says ["string", "null"]


def test_the_clients_schema_check_made_once_a_schema_still_refuses_a_bad_one_each_time():
    """support.check_each_schema_once keeps only successes: a bad schema fails every session's check."""
    from jsonschema import SchemaError
    from jsonschema.validators import Draft202012Validator

    for _ in range(2):
        with pytest.raises(SchemaError):
            Draft202012Validator.check_schema({"type": 12})
    Draft202012Validator.check_schema({"type": "object"})
    Draft202012Validator.check_schema({"type": "object"})
