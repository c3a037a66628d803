"""Bad input costs one clear error (issue 30.5): a result_schema nested past any sensible depth, or whose pattern
nests thousands of groups, is a bad_request naming the field, not an unexpected problem; a deep one within the
bound is taken."""

from __future__ import annotations

import pytest

from fleet_mcp.rules import check_result_schema


@pytest.fixture
def app_mode() -> str:
    """By path only: how apps are reached is not what these tests are about."""
    return "path"


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(("schema", "most"), [
    pytest.param(nested(100), 64, id="100-deep"),  # 201 levels of JSON: past jsonschema's reach
    pytest.param({"type": "object", "properties": {"a": {"type": "string", "pattern": "(" * 3_000 + ")" * 3_000}}},
                 32, id="3000-nested-groups"),
])
async def test_a_costly_result_schema_is_a_bad_request(tools, emulator, schema, most):
    await tools("create_agent", name="typed", project="fleet-demo", spec="Tidy the README.")
    emulator.advance(30)
    answer = await tools("start_agent_task", agent_name="typed", task_description="Count the files.",
                         if_busy="interrupt", result_schema=schema)
    assert answer.get("error") == "bad_request" and answer["details"]["field"] == "result_schema", answer
    assert answer["details"]["max_depth"] == most, answer
    made = await tools("create_agent", name="typed-two", project="fleet-demo", spec="Tidy.", result_schema=schema)
    assert made.get("error") == "bad_request" and made["details"]["field"] == "result_schema", made
    assert "typed-two" not in [a["name"] for a in (await tools("list_agents"))["agents"]]



def test_a_deep_result_schema_within_the_bound_is_taken():
    check_result_schema(nested(31))  # 63 levels of JSON
    check_result_schema({"type": "string", "pattern": "^(" * 32 + "x" + ")$" * 32})
