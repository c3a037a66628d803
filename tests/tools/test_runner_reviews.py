"""Reviewing runner agents' work through the tools: the real Claude Code edits and commits in each
workspace's seeded repository (scripted model); `changes`, show_agent_diff and show_agents agree with git,
the patch applies to a fresh clone of the seed, typed answers validate or fail, bad input is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleet_mcp.emulator.runners.project import seed_repository
from tests.runners import all_met, disk, needs_sdk, runner_fleet

pytestmark = [pytest.mark.system, needs_sdk]
VERDICT = {"type": "object", "properties": {"verdict": {"enum": ["ship", "fix"]}, "score": {"type": "integer"}},
           "required": ["verdict", "score"]}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def numstat(repo: Path, *spec: str) -> dict[str, tuple[int, int]]:
    """git's own count of lines added and removed per file."""
    rows = [line.split("\t") for line in git(repo, "diff", "--numstat", *spec).splitlines()]
    return {path: (int(a), int(r)) for a, r, path in rows}


async def test_best_of_three_compared_reviewed_and_taken(conformance, tmp_path):
    async with runner_fleet(conformance) as (tools, coder):
        specs = {"try-1": "Improve calc [[edit:calc.py]]", "try-2": "Improve calc [[finish:2]]",
                 "try-3": "Improve calc [[fail]]"}
        for name, spec in specs.items():
            await tools("create_agent", name=name, project="fleet-demo", spec=spec)
        await tools("create_agent", name="judge", project="fleet-demo", spec="Judge calc [[json]]",
                    result_schema=VERDICT)
        done = await all_met(tools, list(specs), until=["idle", "failed"])
        assert sorted(done["met"]) == sorted(specs)

        glances = {g["name"]: g for g in (await tools("show_agents", agent_names=list(specs)))["agents"]}
        work = {name: await disk(coder, name) for name in specs}
        one = numstat(work["try-1"], "HEAD")
        assert glances["try-1"]["changes_summary"] == f"1 file, +{one['calc.py'][0]} −{one['calc.py'][1]}"
        assert glances["try-2"]["changes_summary"] == "2 files, +2 −0"  # two new files, untracked
        assert [glances[n]["last_turn"] for n in specs] == ["succeeded", "succeeded", "failed"]
        assert glances["try-1"]["last_turn_cost_usd"] > 0 and glances["try-3"]["changes_summary"] == "0 files, +0 −0"

        await coder.delete("/emulator/requests")
        result = await tools("get_agent_result", agent_name="try-1")  # try-1 was seen ready: one round trip
        routes = (await coder.get("/emulator/requests")).json()["routes"]
        assert routes["GET /@{owner}/{workspace}/apps/{slug}/{path}"] == 2  # its state and results, not its log
        changes = result["changes"]
        head = git(work["try-1"], "rev-parse", "HEAD").strip()
        assert changes["repository"] == str(work["try-1"]) and changes["branch"] == "main"
        assert changes["start_commit"] == changes["end_commit"] == head and changes["commits"] == []
        assert [(f["path"], f["change"], f["added_lines"], f["removed_lines"]) for f in changes["files"]] == [
            ("calc.py", "modified", *one["calc.py"])]
        assert result["changes_unavailable"] is None and result["structured"] is None

        # The winner commits its work: Claude Code asks before `git commit`, the orchestrator allows it.
        await tools("start_agent_task", agent_name="try-1", task_description="Commit it [[commit]]")
        asking = await all_met(tools, ["try-1"], until="needs_input")
        await tools("answer_agent", agent_name="try-1", prompt_id=asking["agents"][0]["pending"]["prompt_id"],
                    digest=asking["agents"][0]["pending"]["digest"], decision="allow")
        await all_met(tools, ["try-1"])
        committed = (await tools("get_agent_result", agent_name="try-1"))["changes"]
        head = git(work["try-1"], "rev-parse", "HEAD").strip()
        assert committed["commits"] == [{"sha": head, "subject": "Scripted commit"}]
        # This task's files: what it wrote itself, not the earlier edit it committed.
        assert committed["end_commit"] == head and [(f["path"], f["change"]) for f in committed["files"]] == [
            ("step-1.txt", "added")]

        diff = await tools("show_agent_diff", agent_name="try-1", scope="agent", format="patch")
        assert [f["path"] for f in diff["files"]] == ["calc.py", "step-1.txt"] and diff["pages"] == 1
        assert diff["patch"] == git(work["try-1"], "diff", "--full-index", "HEAD~1", "HEAD")
        clone = tmp_path / "checkout"
        seed_repository(clone)  # the orchestrator's own checkout of the same seed
        subprocess.run(["git", "-C", str(clone), "apply", "--index", "-"], input=diff["patch"], text=True, check=True)
        assert (clone / "calc.py").read_text() == (work["try-1"] / "calc.py").read_text()
        one_file = await tools("show_agent_diff", agent_name="try-1", scope="agent", path="calc.py")
        assert one_file["patch"] is None and one_file["files"][0]["diff"] == diff["files"][0]["diff"]

        await all_met(tools, ["judge"])
        judged = await tools("get_agent_result", agent_name="judge")  # the spec's own turn, typed
        assert judged["task"] == "Judge calc [[json]]" and judged["structured"] == {"verdict": "ship", "score": 1}

        typed = await tools("start_agent_task", agent_name="try-2", task_description="Judge [[json]]",
                            result_schema=VERDICT)
        assert typed["agent_status"] == "busy"
        await all_met(tools, ["try-2"])
        answer = await tools("get_agent_result", agent_name="try-2")
        assert answer["outcome"] == "succeeded" and answer["structured"] == {"verdict": "ship", "score": 1}
        await tools("start_agent_task", agent_name="try-2", task_description='Judge [[json:{"verdict":"meh"}]]',
                    result_schema=VERDICT)
        await all_met(tools, ["try-2"], until=["idle", "failed"])
        wrong = await tools("get_agent_result", agent_name="try-2")
        assert wrong["outcome"] == "failed" and wrong["structured"] is None and "result_schema" in wrong["text"]

        for bad in ({"path": "../etc/passwd"}, {"path": "/etc/passwd"}, {"path": "README.md"}):
            refused = await tools.error("show_agent_diff", agent_name="try-1", **bad)
            assert refused["error"] == "bad_request" and refused["details"]["field"] == "path", refused
        for schema in ({"type": "nonsense"}, {"type": "object", "description": "x" * 20_000}):
            refused = await tools.error("start_agent_task", agent_name="try-2", task_description="Judge",
                                        result_schema=schema)
            assert refused["error"] == "bad_request" and refused["details"]["field"] == "result_schema"
        assert (await tools("show_agent", agent_name="try-2"))["agent"]["status"] == "idle"  # nothing was sent

        await tools("stop_agent", agent_name="try-3")
        halted = await all_met(tools, ["try-3"], until="stopped")
        assert halted["met"] == ["try-3"], halted
        stopped = await tools.error("show_agent_diff", agent_name="try-3")
        assert stopped["error"] == "bad_request" and "stopped" in stopped["message"]
        await tools("delete_agent", agent_name="try-3")
        gone = await tools.error("show_agent_diff", agent_name="try-3")
        assert gone["error"] == "bad_request" and gone["details"]["status"] == "deleting", gone
