"""The fault matrix's rows on Coder's API (`fault_matrix`): bursts every read rides out, Coder down for good,
nothing listening.
"""

from __future__ import annotations

import pytest

from tests.fault_matrix import Rig, cases, run_case

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(**cases("coder"))
async def test_fault(rig: Rig, fault: str, tool: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    await run_case(rig, fault, tool, caplog, capfd)
