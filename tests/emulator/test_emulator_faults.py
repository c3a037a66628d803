"""Faults through the control API: one test per kind, count semantics, control routes never
faulted. Connection-level faults (drop, stall, latency, truncate) run on a real loopback
socket (fact 15): ASGITransport knows neither timeouts nor connections."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.emulator.faults import ConnectionDropped
from tests.support import ALICE_TOKEN, TOKEN

SIGNED_OUT = "You are signed out or your session has expired. Please sign in again to continue."
WORKSPACES = "/api/v2/workspaces"


def in_process(emulator: Emulator, token: str | None = TOKEN) -> httpx.AsyncClient:
    headers = {"Coder-Session-Token": token} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                             headers=headers)


def on_socket(url: str, timeout: float = 2.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": TOKEN}, timeout=timeout)


async def add_fault(client: httpx.AsyncClient, **rule: object) -> dict[str, Any]:
    r = await client.post("/emulator/faults", json=rule)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def fired(client: httpx.AsyncClient) -> list[int]:
    return [rule["fired"] for rule in (await client.get("/emulator/faults")).json()["faults"]]


async def test_status_fault_answers_coder_json_for_count_requests_then_clears(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        rule = await add_fault(c, match="GET /api/v2/workspaces", kind="status", code=503, count=2)
        assert rule["id"] and rule["remaining"] == 2
        for _ in range(2):
            r = await c.get(WORKSPACES)
            assert r.status_code == 503
            assert r.json() == {"message": "Service Unavailable."}
            assert r.headers["x-coder-build-version"] == emulator.backend.version
        assert (await c.get(f"{WORKSPACES}/{uuid.uuid4()}")).status_code == 404  # another route: untouched
        r = await c.get(WORKSPACES)
        assert r.status_code == 200 and "workspaces" in r.json()
        [listed] = (await c.get("/emulator/faults")).json()["faults"]
        assert (listed["fired"], listed["remaining"]) == (2, 0)
        # Faulted requests never reached the backend.
        assert (await c.get("/emulator/requests")).json()["routes"]["GET /api/v2/workspaces"] == 1


async def test_status_429_carries_retry_after_and_coders_message(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        await add_fault(c, match="* /api/v2/*", kind="status", code=429, retry_after=7, count=1)
        r = await c.get("/api/v2/users/me")
        assert r.status_code == 429 and r.headers["retry-after"] == "7"
        assert r.json() == {"message": "You've been rate limited for sending more than 512 requests in 1m0s."}
        assert (await c.get("/api/v2/users/me")).status_code == 200


async def test_status_on_app_proxy_paths_is_an_html_page(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        await add_fault(c, match="* /@*/apps/ccw/*", kind="status", code=502, message="Bad gateway, upstream gone")
        r = await c.get("/@demo/alpha.main/apps/ccw/status")
        assert r.status_code == 502 and r.headers["content-type"].startswith("text/html")
        assert "Bad gateway, upstream gone" in r.text
        r = await c.get(WORKSPACES)  # the API is not matched by this rule
        assert r.status_code == 200


async def test_route_placeholders_match_one_segment(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        await add_fault(c, match="GET /api/v2/users/{user}", kind="status", code=500)
        assert (await c.get("/api/v2/users/me")).status_code == 500
        assert (await c.get("/api/v2/users/me/organizations")).status_code == 200


async def test_control_routes_are_never_faulted(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        await add_fault(c, match="* *", kind="status", code=500)
        await add_fault(c, match="* /emulator/*", kind="garbage")
        assert (await c.get(WORKSPACES)).status_code == 500
        assert (await c.get("/emulator/clock")).status_code == 200
        assert (await c.get("/emulator/requests")).status_code == 200
        assert await fired(c) == [1, 0]
        r = await c.delete("/emulator/faults")
        assert r.status_code == 200 and r.json() == {"faults": []}
        assert (await c.get(WORKSPACES)).status_code == 200


async def test_delete_one_fault_and_reset_clears_all(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        first = await add_fault(c, match="GET /api/v2/workspaces", kind="status", code=500)
        await add_fault(c, match="GET /api/v2/users/*", kind="status", code=500)
        assert (await c.delete(f"/emulator/faults/{first['id']}")).json() == {"deleted": first["id"]}
        assert (await c.delete(f"/emulator/faults/{first['id']}")).status_code == 404
        assert (await c.get(WORKSPACES)).status_code == 200
        assert (await c.get("/api/v2/users/me")).status_code == 500
        assert (await c.post("/emulator/reset", json={})).status_code == 200
        assert (await c.get("/emulator/faults")).json() == {"faults": []}
        assert (await c.get("/api/v2/users/me")).status_code == 200


@pytest.mark.parametrize(("body", "complaint"), [
    ({"match": "GET /x", "kind": "explode"}, "kind must be one of"),
    ({"kind": "status", "code": 500}, "match must be"),
    ({"match": "/api/v2/workspaces", "kind": "drop"}, "match must be"),
    ({"match": "GET api/v2", "kind": "drop"}, "match must be"),
    ({"match": "GET /x", "kind": "status"}, "needs 'code'"),
    ({"match": "GET /x", "kind": "status", "code": 200}, "HTTP error status"),
    ({"match": "GET /x", "kind": "latency"}, "needs 'seconds'"),
    ({"match": "GET /x", "kind": "latency", "seconds": "1"}, "non-negative number"),
    ({"match": "GET /x", "kind": "drop", "count": 0}, "count must be a positive integer"),
    ({"match": "GET /x", "kind": "stall", "second": 5}, "unknown parameter(s) for stall: second"),
    ([1, 2], "expected a JSON object"),
])
async def test_bad_rules_are_refused_with_400(emulator: Emulator, body: object, complaint: str) -> None:
    async with in_process(emulator) as c:
        r = await c.post("/emulator/faults", json=body)
        assert r.status_code == 400 and complaint in r.json()["error"], r.text
        r = await c.post("/emulator/faults", content=b"{not json")
        assert r.status_code == 400
        assert (await c.get("/emulator/faults")).json() == {"faults": []}


async def test_garbage_is_a_200_json_answer_that_is_not_json(emulator: Emulator) -> None:
    async with in_process(emulator) as c:
        await add_fault(c, match="GET /api/v2/workspaces", kind="garbage", count=1)
        r = await c.get(WORKSPACES)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        with pytest.raises(json.JSONDecodeError):
            r.json()
        assert (await c.get(WORKSPACES)).json()["count"] >= 0


async def test_token_expiry_refuses_the_token_after_n_requests(emulator: Emulator) -> None:
    async with in_process(emulator) as c, in_process(emulator, ALICE_TOKEN) as alice:
        rule = await add_fault(c, kind="token_expiry", after=2)
        assert rule["params"]["token"] == TOKEN and rule["match"] == "* *"
        for _ in range(2):
            assert (await c.get(WORKSPACES)).status_code == 200
        r = await c.get("/api/v2/users/me")
        assert r.status_code == 401 and r.json()["message"] == SIGNED_OUT
        assert (await c.get("/api/v2/buildinfo")).status_code == 200  # no authentication there
        assert (await alice.get("/api/v2/users/me")).status_code == 200  # other tokens still work
        r = await c.get("/@demo/alpha.main/apps/ccw/status?x=1")
        assert r.status_code == 303 and r.headers["content-type"].startswith("text/html")
        assert r.headers["location"] == (
            "http://coder.test/login?message=You+are+signed+out+or+your+session+has+expired.+Please+sign+in+"
            "again+to+continue.&redirect=%2F%40demo%2Falpha.main%2Fapps%2Fccw%2Fstatus%3Fx%3D1")
        assert "See Other" in r.text
        assert await fired(c) == [2]
        await c.delete(f"/emulator/faults/{rule['id']}")
        assert (await c.get("/api/v2/users/me")).status_code == 200


async def test_drop_closes_the_connection_without_a_response(emulator: Emulator) -> None:
    async with running(emulator) as url, on_socket(url) as c:
        await add_fault(c, match="GET /api/v2/workspaces", kind="drop", count=1)
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await c.get(WORKSPACES)
        assert (await c.get(WORKSPACES)).status_code == 200
        assert await fired(c) == [1]
    async with in_process(emulator) as c:  # no socket to close: the app raises instead
        await add_fault(c, match="GET /api/v2/workspaces", kind="drop", count=1)
        with pytest.raises(ConnectionDropped):
            await c.get(WORKSPACES)


async def test_stall_runs_past_the_client_timeout_and_ends_when_the_client_leaves(emulator: Emulator) -> None:
    async with running(emulator) as url, on_socket(url, timeout=0.2) as c:
        await add_fault(c, match="GET /api/v2/workspaces", kind="stall", seconds=0.6, count=1)
        with pytest.raises(httpx.ReadTimeout):
            await c.get(WORKSPACES)
        await asyncio.sleep(0.6)
        # The client left before the stall ran out: the request never reached the backend.
        assert "GET /api/v2/workspaces" not in (await c.get("/emulator/requests")).json()["routes"]
        assert (await c.get(WORKSPACES)).status_code == 200


async def test_stall_ends_promptly_when_the_server_shuts_down(emulator: Emulator) -> None:
    async with httpx.AsyncClient(headers={"Coder-Session-Token": TOKEN}, timeout=10) as c:
        async with running(emulator) as url:
            r = await c.post(url + "/emulator/faults", json={"match": "GET /api/v2/workspaces", "kind": "stall"})
            assert r.json()["params"] == {"seconds": 60.0}
            pending = asyncio.create_task(c.get(url + WORKSPACES))
            await asyncio.sleep(0.2)
            assert not pending.done()
            started = time.monotonic()
        assert time.monotonic() - started < 1.5
        with pytest.raises(httpx.RemoteProtocolError):
            await pending


async def test_latency_delays_the_real_answer_and_keeps_the_request_body(emulator: Emulator) -> None:
    async with running(emulator) as url, on_socket(url) as c:
        await add_fault(c, match="POST /api/v2/users/*/workspaces", kind="latency", seconds=0.3, count=1)
        template = (await c.get("/api/v2/organizations/coder/templates/docker")).json()
        started = time.monotonic()
        r = await c.post("/api/v2/users/me/workspaces", json={"name": "slow", "template_id": template["id"]})
        assert r.status_code == 201 and r.json()["name"] == "slow", r.text
        assert time.monotonic() - started >= 0.3
        started = time.monotonic()
        r = await c.post("/api/v2/users/me/workspaces", json={"name": "quick", "template_id": template["id"]})
        assert r.status_code == 201 and time.monotonic() - started < 0.3


async def test_truncate_cuts_the_body_and_fixes_content_length(emulator: Emulator) -> None:
    async with running(emulator) as url, on_socket(url) as c:
        whole = (await c.get(WORKSPACES)).content
        await add_fault(c, match="GET /api/v2/workspaces", kind="truncate", count=1)
        await add_fault(c, match="GET /api/v2/workspaces", kind="truncate", bytes=10, count=1)
        for expected in (whole[:len(whole) // 2], whole[:10]):
            r = await c.get(WORKSPACES)
            assert r.status_code == 200 and r.content == expected
            assert r.headers["content-length"] == str(len(expected))
            with pytest.raises(json.JSONDecodeError):
                r.json()
        assert (await c.get(WORKSPACES)).content == whole
