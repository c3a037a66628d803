"""The fault matrix's rows behind the app proxy (`fault_matrix`): AgentAPI failing for a while or for good, the
proxy's own pages, the workspace stopped; and one session riding out faults.
"""

from __future__ import annotations

import json

import pytest

from tests.fault_matrix import MATRIX, UNEXPECTED, Rig, cases, prepare, run_case

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(**cases("proxy"))
async def test_fault(rig: Rig, fault: str, tool: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    await run_case(rig, fault, tool, caplog, capfd)


async def test_one_session_rides_out_faults_and_still_answers(rig: Rig) -> None:
    """What the matrix checks per fresh session, one long-lived session of each server also survives:
    persistent faults on every route, then none, and it answers as if nothing happened."""
    for profile, faults in (("main", ("api-500-persistent", "api-drop-persistent", "proxy-garbage-persistent",
                                      "api-500x2")),
                            ("slow", ("api-500-persistent",))):
        async with rig.tools(profile) as tools:
            for fault in faults:
                prepare(rig.emulator)
                for r in MATRIX[fault][0].rules:
                    rig.emulator.control.faults.add(r)
                answer = await tools("show_agent", agent_name="runner")
                assert UNEXPECTED not in json.dumps(answer), answer
            prepare(rig.emulator)
            projects = await tools("list_agent_projects")
            assert [p["name"] for p in projects["projects"]] == ["fleet-demo", "fleet-research"], projects
            assert (await tools("show_agent", agent_name="runner"))["agent"]["status"] == "busy"
