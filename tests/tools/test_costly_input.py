"""Bad input costs one clear error (issue 30.5): a result_schema nested past any sensible depth, or whose pattern
nests thousands of groups, is a bad_request naming the field, not an unexpected problem; a deep one within the
bound is taken. A big diff fills a page to a byte budget and names what it left out, never blaming the agent."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from fleet_mcp.emulator.runners.project import seed_repository
from fleet_mcp.fleet.rules import check_result_schema
from fleet_mcp.runner.changes import ChangeLog
from tests.support import runner_agent


@pytest.fixture
def app_mode() -> str:
    """By path only: how apps are reached is not what these tests are about."""
    return "path"


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
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


@pytest.mark.system  # git, in the runner's own change log
async def test_a_patch_of_twenty_big_files_fills_a_page_and_names_the_rest(tools, coder, emulator, tmp_path):
    repo = tmp_path / "work"
    await asyncio.to_thread(seed_repository, repo)
    log = ChangeLog(repo, tmp_path / "state")
    await log.begin()
    for i in range(20):  # 20 files of 5,000 lines: each diff ~40 KB, under the 50 KB a file's diff is cut at
        (repo / f"big{i:02}.txt").write_text("".join(f"{i}-{n}\n" for n in range(5_000)))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, capture_output=True)
    await log.finish()
    page = await log.diff("task", None, "patch", 1, 20)  # what the runner answers show_agent_diff's default page
    await runner_agent(coder, emulator, "big")
    stand_in = {"match": "GET /@demo/big.*/apps/fleet/diff", "kind": "garbage", "body": page.model_dump_json()}
    assert (await coder.post("/emulator/faults", json=stand_in)).status_code == 201

    shown = await tools("show_agent_diff", agent_name="big", format="patch")
    assert "error" not in shown, shown
    whole = [f for f in shown["files"] if not f["truncated"]]
    named = [f for f in shown["files"] if f["truncated"]]
    assert [f["path"] for f in shown["files"]] == [f"big{i:02}.txt" for i in range(20)]
    assert whole and named and all(f["diff"] and f["path"] in shown["patch"] for f in whole), len(whole)
    assert all(not f["diff"] and f"path={f['path']!r}" in f["note"] and f["path"] not in shown["patch"]
               for f in named), named[0]
    one = await log.diff("task", named[0]["path"], "patch", 1, 20)  # what the note says to ask for next
    assert one.patch is not None and one.patch.count("+++ b/") == 1 and named[0]["path"] in one.patch
