"""A user's waits stay within their share of Coder's rate limit (FLEET_MCP_RATE_SHARE of 512 requests/minute)."""

from __future__ import annotations

import asyncio

import httpx
from fastmcp import Client
from starlette.types import ASGIApp

from fleet_mcp.server import build_server
from tests.support import Tools, fleet_settings

BUDGET = 10  # requests a minute: FLEET_MCP_RATE_SHARE = 10/512


class Counted(httpx.AsyncBaseTransport):
    """The emulator in-process, with the count of requests the fleet sent it (as Coder's rate limiter counts)."""

    def __init__(self, app: ASGIApp) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return await self.inner.handle_async_request(request)


async def test_a_burst_of_waits_stays_within_the_users_rate_share(emulator):
    counted = Counted(emulator.app)
    settings = fleet_settings(rate_share=BUDGET / 512, wait_poll_interval_s=0.01, progress_interval_s=60)
    async with Client(build_server(settings, transport=counted)) as client:
        tools = Tools(client)
        created = await tools("create_agent", name="patient", project="fleet-demo", spec="Never stops.")
        assert created["agent"]["name"] == "patient"
        before = counted.sent
        # Twenty waits at once on an agent that will not stop, each polling every 10 ms for a second and a half:
        # unchecked, that is hundreds of listings; within the budget, one minute allows what is left of 10.
        answers = await asyncio.gather(*(tools("wait_for_agents", agent_names=["patient"], until="stopped",
                                               timeout_s=1.5) for _ in range(20)))
        later = [await tools("wait_for_agents", agent_names=["patient"], until="stopped", timeout_s=0.5)
                 for _ in range(3)]
    assert counted.sent <= BUDGET + 1, (before, counted.sent)  # +1: a poll already on its way when the count filled
    waited = [a for a in answers if "timed_out" in a]
    assert waited and all(a["timed_out"] for a in waited)
    refused = [a for a in answers + later if "error" in a]
    assert refused, "the burst went over the budget, so some waits must be refused"
    for answer in refused:
        assert answer["error"] == "unavailable", answer
        assert 0 < answer["details"]["retry_after_s"] <= 60 and "retry in" in answer["message"], answer
    assert all("error" in a for a in later)  # the minute is spent: nothing more until it has passed


async def test_background_looks_stay_within_the_users_rate_share(emulator):
    """tasks/get polled hard: past the user's share, looks answer from the listing last fetched."""
    from tests.tasks_client import TasksClient

    counted = Counted(emulator.app)
    settings = fleet_settings(rate_share=BUDGET / 512, wait_poll_interval_s=0.01)
    tasks = TasksClient(pause_s=0.0)
    async with Client(build_server(settings, transport=counted), extensions=[tasks.extension()]) as client:
        tools = Tools(client)
        await tools("create_agent", name="polled", project="fleet-demo", spec="Never stops.")
        created = await client.session.call_tool("wait_for_agents", {"agent_names": ["polled"], "until": "stopped",
                                                                     "timeout_s": 600}, allow_claimed=True)
        for _ in range(60):
            state = await tasks.request(client.session, "tasks/get", {"taskId": created.task_id})
            assert state["status"] == "working"
            await asyncio.sleep(0.02)
    assert counted.sent <= BUDGET + 1, counted.sent
