"""The Coder client against the emulator: typed answers, typed errors, retries for safe requests only."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import UTC, timedelta

import httpx
import pytest

from fleet_mcp.coder import errors as ce
from fleet_mcp.coder.client import CoderClient
from fleet_mcp.emulator.app import running
from fleet_mcp.times import iso
from tests.support import ALICE_TOKEN, TOKEN, fleet_settings


@pytest.fixture
async def client(emulator):
    async with fleet_settings(retry_budget_s=3.0).coder_client(httpx.ASGITransport(app=emulator.app)) as c:
        yield c


async def fault(coder: httpx.AsyncClient, match: str, kind: str, **params: object) -> None:
    r = await coder.post("/emulator/faults", json={"match": match, "kind": kind, **params})
    assert r.status_code == 201, r.text


async def hits(coder: httpx.AsyncClient, route: str) -> int:
    routes: int = (await coder.get("/emulator/requests")).json()["routes"].get(route, 0)
    return routes


async def test_typed_reads(client):
    me = await client.me()
    assert me.username == "demo"
    templates = await client.templates()
    fleet = next(t for t in templates if t.name == "fleet-demo")
    presets = await client.presets(fleet.active_version_id)
    assert [p.name for p in presets] == ["coder", "operator", "manager"]
    page = await client.workspaces("owner:me")
    assert page.count == 2 and page.workspaces[0].latest_build.status == "running"
    created = page.workspaces[0].created_at  # a workspace's times keep Coder's +01:00 (coder/lenient.py) ...
    assert created is not None and created.utcoffset() == timedelta(hours=1)
    assert iso(created) == created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # ... and are written in UTC


async def test_create_and_errors_are_typed(client):
    fleet = await client.template_by_name("coder", "fleet-demo")
    ws = await client.create_workspace("me", name="typed", template_id=fleet.id, parameters={"fleet_mcp_managed": "true"})
    assert ws.latest_build.status == "pending"
    with pytest.raises(ce.Conflict) as exc:
        await client.create_workspace("me", name="typed", template_id=fleet.id)
    assert exc.value.status == 409 and exc.value.validations[0].field == "name"
    with pytest.raises(ce.Conflict, match="already active"):
        await client.create_build(ws.id, "stop")
    with pytest.raises(ce.NotFound):
        await client.workspace_by_name("me", "nothing-here")


async def test_reads_retry_through_a_5xx_burst(client, coder):
    await fault(coder, "GET /api/v2/users/*", "status", code=503, count=2)
    assert (await client.me()).username == "demo"
    assert await hits(coder, "GET /api/v2/users/{user}") == 1  # the two 503s never reached the backend
    rules = (await coder.get("/emulator/faults")).json()["faults"]
    assert rules[0]["fired"] == 2


async def test_reads_honour_retry_after(client, coder):
    await fault(coder, "GET /api/v2/organizations", "status", code=429, retry_after=1, count=1)
    started = time.monotonic()
    assert (await client.organizations())[0].name == "coder"
    assert time.monotonic() - started >= 0.9


async def test_reads_retry_a_truncated_or_garbage_body(client, coder):
    await fault(coder, "GET /api/v2/templates", "garbage", count=1)
    await fault(coder, "GET /api/v2/regions", "truncate", count=1)
    assert len(await client.templates()) == 3
    assert (await client.regions())[0].name == "primary"


async def test_parsing_leaves_the_collector_as_it_found_it(client, coder):
    """Answers are parsed with the garbage collector paused; a failed parse must not leave it off, and a caller
    who turned it off must not find it back on."""
    assert gc.isenabled()
    await fault(coder, "GET /api/v2/templates", "garbage", count=1)  # unreadable JSON, then read again
    assert len(await client.templates()) == 3
    assert gc.isenabled()
    gc.disable()
    try:
        assert (await client.workspaces("owner:me")).count == 2
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert (await hits(coder, "GET /api/v2/templates")) == 1  # the garbage never reached the backend


async def test_writes_are_never_retried(client, coder):
    fleet = await client.template_by_name("coder", "fleet-demo")
    await fault(coder, "POST /api/v2/users/*/workspaces", "status", code=503, count=1)
    await coder.delete("/emulator/requests")
    with pytest.raises(ce.ServerError):
        await client.create_workspace("me", name="once", template_id=fleet.id)
    rules = (await coder.get("/emulator/faults")).json()["faults"]
    assert rules[0]["fired"] == 1 and rules[0]["remaining"] == 0


async def test_retries_give_up_within_the_budget(emulator, coder):
    await fault(coder, "GET /api/v2/users/*", "status", code=502)
    async with fleet_settings(retry_budget_s=1.0).coder_client(httpx.ASGITransport(app=emulator.app)) as c:
        started = time.monotonic()
        with pytest.raises(ce.ServerError):
            await c.me()
    assert time.monotonic() - started < 3


async def test_refused_token_is_unauthorized_and_not_retried(emulator, coder):
    async with fleet_settings(coder_session_token="nope").coder_client(httpx.ASGITransport(app=emulator.app)) as c:
        with pytest.raises(ce.Unauthorized) as exc:
            await c.me()
    assert "nope" not in str(exc.value)


async def test_members_see_only_their_own(emulator):
    async with fleet_settings(coder_session_token=ALICE_TOKEN).coder_client(httpx.ASGITransport(app=emulator.app)) as c:
        assert [w.name for w in (await c.workspaces()).workspaces] == ["alice-agent"]


async def test_the_leaf_client_counts_its_requests_and_keeps_within_the_callers_deadline(emulator, coder):
    """Built from explicit parameters: every request sent (retries too) reaches `on_request`, and retries stop
    at the caller's deadline, not at the end of the 20 s retry budget."""
    await fault(coder, "GET /api/v2/users/*", "status", code=503)
    sent: list[float] = []
    end = asyncio.get_running_loop().time() + 0.5
    async with CoderClient("http://coder.test", TOKEN, transport=httpx.ASGITransport(app=emulator.app),
                           retry_budget_s=20.0, on_request=lambda: sent.append(time.monotonic())) as c:
        started = time.monotonic()
        with pytest.raises(ce.ServerError):
            await c.me(deadline=end)
    assert time.monotonic() - started < 1.5
    rules = (await coder.get("/emulator/faults")).json()["faults"]
    assert len(sent) == rules[0]["fired"] >= 2


class TestOnASocket:
    """Dropped connections and stalls need a real socket (ASGITransport has no timeouts)."""

    async def test_dropped_connection_then_success(self, emulator):
        async with running(emulator) as url:
            async with httpx.AsyncClient(base_url=url) as control:
                await control.post("/emulator/faults", json={"match": "GET /api/v2/users/*", "kind": "drop",
                                                            "count": 1})
            async with fleet_settings(coder_url=url).coder_client() as c:
                assert (await c.me()).username == "demo"

    async def test_stall_past_the_timeout_then_success(self, emulator):
        async with running(emulator) as url:
            async with httpx.AsyncClient(base_url=url) as control:
                await control.post("/emulator/faults", json={"match": "GET /api/v2/users/*", "kind": "stall",
                                                            "seconds": 5, "count": 1})
            async with fleet_settings(coder_url=url, request_timeout_s=0.3).coder_client() as c:
                started = time.monotonic()
                assert (await c.me()).username == "demo"
            assert time.monotonic() - started < 3

    async def test_connection_refused_is_unavailable(self):
        async with fleet_settings(coder_url="http://127.0.0.1:9", retry_budget_s=0.5).coder_client() as c:
            with pytest.raises(ce.Unavailable):
                await c.me()


def test_token_constant_is_the_demo_token():
    assert TOKEN == "demo-token"
