"""The fault matrix's rows on writes and the token (`fault_matrix`): a failed write sent once and answered at
once, a token refused, a workspace deleted under the call; and Retry-After honoured.
"""

from __future__ import annotations

import time

import pytest

from tests.fault_matrix import AGENTS, API, Rig, cases, prepare, run_case, status

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(**cases("writes"))
async def test_fault(rig: Rig, fault: str, tool: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    await run_case(rig, fault, tool, caplog, capfd)


async def test_retry_after_is_honoured_when_the_budget_allows(rig: Rig) -> None:
    """429 with Retry-After: 1 and a budget of 1 s: the one retry waits the second Coder asked for."""
    prepare(rig.emulator)
    rig.emulator.control.faults.add(status(API, 429, 1, retry_after=1))
    started = time.monotonic()
    async with rig.tools("slow") as tools:
        answer = await tools("list_agents")
    assert {a["name"] for a in answer["agents"]} == set(AGENTS)
    assert time.monotonic() - started >= 0.9
