"""Nothing made twice, nothing half-made: ambiguous create failures and deletes mid-build."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.emulator.app import running
from fleet_mcp.server import build_server
from tests.support import CheckedTransport, Tools, fleet_settings

SPEC = "Ship it [[finish:2]]"


async def named(coder: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    page = (await coder.get("/api/v2/workspaces", params={"q": f"owner:me name:{name}"})).json()
    return [w for w in page["workspaces"] if w["name"] == name]


@pytest.fixture
async def over_socket(emulator, conformance):
    """The fleet server talking to the emulator over a real loopback socket."""
    async with running(emulator) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": "demo-token"}) as coder:
            settings = fleet_settings(coder_url=url, request_timeout_s=0.5, poll_interval_s=0.3)
            transport = CheckedTransport(httpx.AsyncHTTPTransport(), conformance)
            async with Client(build_server(settings, transport=transport)) as client:
                yield Tools(client), coder


async def fault(coder: httpx.AsyncClient, **rule: object) -> None:
    r = await coder.post("/emulator/faults", json=rule)
    assert r.status_code == 201, r.text


async def test_create_that_landed_is_adopted_not_repeated(over_socket):
    """Coder made the workspace, but its answer broke on the way back."""
    tools, coder = over_socket
    await fault(coder, match="POST /api/v2/users/*/workspaces", count=1, kind="truncate")
    created = await tools("create_agent", name="once", project="fleet-demo", spec=SPEC)
    assert created.get("agent", {}).get("name") == "once", created
    assert len(await named(coder, "once")) == 1
    again = await tools.error("create_agent", name="once", project="fleet-demo", spec=SPEC)
    assert again["error"] == "bad_request"
    assert len(await named(coder, "once")) == 1


@pytest.mark.parametrize("rule", [
    {"kind": "drop"}, {"kind": "status", "code": 503}, {"kind": "status", "code": 502},
    {"kind": "latency", "seconds": 2},  # the client gave up first; Coder never acted on it
])
async def test_create_that_never_landed_says_so_and_made_nothing(over_socket, rule):
    tools, coder = over_socket
    await fault(coder, match="POST /api/v2/users/*/workspaces", count=1, **rule)
    error = await tools.error("create_agent", name="never", project="fleet-demo", spec=SPEC)
    assert error["error"] == "unavailable" and "nothing was created" in error["message"]
    assert await named(coder, "never") == []
    assert (await tools("create_agent", name="never", project="fleet-demo", spec=SPEC))["agent"]["name"] == "never"
    assert len(await named(coder, "never")) == 1


async def test_create_posts_exactly_once_whatever_happens(over_socket):
    tools, coder = over_socket
    await fault(coder, match="POST /api/v2/users/*/workspaces", kind="status", code=500)
    await tools.error("create_agent", name="stubborn", project="fleet-demo", spec=SPEC)
    rules = (await coder.get("/emulator/faults")).json()["faults"]
    assert rules[0]["fired"] == 1


async def test_delete_waits_for_a_build_it_may_not_cancel(emulator, conformance):
    """Alice is no site owner and fleet-research forbids user cancels: delete waits for the build."""
    from tests.support import ALICE_TOKEN, client_for

    settings = fleet_settings(coder_session_token=ALICE_TOKEN)
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    async with client_for(emulator, conformance, ALICE_TOKEN) as coder, \
            Client(build_server(settings, transport=transport)) as client:
        tools = Tools(client)
        await tools("create_agent", name="slowpoke", project="fleet-research", spec=SPEC)
        await coder.post("/emulator/clock", json={"per_request": 0.2})  # time passes as the fleet polls
        deleted = await tools("delete_agent", agent_name="slowpoke")
        assert deleted["deleted_agent"]["name"] == "slowpoke"
        ws = (await coder.get("/api/v2/users/me/workspace/slowpoke")).json()
        builds = (await coder.get(f"/api/v2/workspaces/{ws['id']}/builds")).json()
    assert [(b["transition"], b["job"]["status"]) for b in builds][1] == ("start", "succeeded")
    assert builds[0]["transition"] == "delete"
