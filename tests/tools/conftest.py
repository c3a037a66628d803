"""The fault matrix's `rig` (one emulator on a socket, a fleet server per settings profile), found by pytest here
for the matrix's three files; module-scoped, so each file builds its own. `story`: a runner story on its file's
shared runner fleet (`fleet = runners.shared_runner_fleet(...)`), whose agents are deleted after it."""

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.fault_matrix import rig  # noqa: F401 - a fixture, registered by being imported here
from tests.runners import SharedFleet


@pytest_asyncio.fixture(loop_scope="module")
async def story(fleet: SharedFleet) -> AsyncIterator[SharedFleet]:
    yield fleet
    await fleet.forget_agents()
