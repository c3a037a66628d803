"""The emulator's app proxy hands an app what Coder's does, and reads an app request's token where Coder's does
(coderd/workspaceapps/proxy.go, cookies.go, httpapi/cookie.go; specs/coder-apps.md)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.emulator.coder.proxy import strip_coder_cookies
from fleet_mcp.emulator.runners.runtime import RunnerForward
from tests.support import TOKEN

HAND_MADE = "/@demo/hand-made/apps/ccw"  # seeded: demo's workspace with an AgentAPI app
WILDCARD = "*.apps.emulator.test"
HOST = "ccw--hand-made--demo.apps.emulator.test"


@pytest.mark.parametrize(("header", "kept"), [  # Coder's own cases (coderd/httpapi/cookie_test.go)
    ("testing=hello; wow=test", "testing=hello; wow=test"),
    ("coder_session_token=moo; wow=test", "wow=test"),
    ("another_token=wow; coder_session_token=ok", "another_token=wow"),
    ("coder_session_token=ok; oauth_state=wow; oauth_redirect=/", ""),
    ("coder_path_app_session_token=ok; wow=test", "wow=test"),
    ("coder_subdomain_app_session_token=ok; coder_subdomain_app_session_token_1234567890=ok; wow=test", "wow=test"),
    ("coder_signed_app_token=ok; wow=test", "wow=test"),
])
def test_coders_cookies_are_stripped_as_coder_strips_them(header, kept):
    assert strip_coder_cookies(header) == kept


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"path": request.url.path, "query": request.url.query,
                         "headers": [[k.decode(), v.decode()] for k, v in request.headers.raw]})


@asynccontextmanager
async def listening(emulator: Emulator) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the in-process emulator whose every app port is held by a listener echoing what it got."""
    listener = Starlette(routes=[Route("/{rest:path}", echo, methods=["GET", "POST"])])
    async with running(SimpleNamespace(app=listener)) as url, httpx.AsyncClient(  # type: ignore[arg-type]
            transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test") as client:
        assert (await client.post("/emulator/app-listener", json={"url": url})).status_code == 200
        yield client


@pytest.mark.parametrize("form", ["path", "subdomain"])
async def test_the_app_gets_every_header_cookie_and_query_but_coders_cookies(emulator, form):
    emulator.backend.wildcard_hostname = WILDCARD
    url, host = (f"{HAND_MADE}/status", "coder.test") if form == "path" else ("/status", HOST)
    async with listening(emulator) as client:
        r = await client.get(url, params={"coder_session_token": TOKEN, "a": "1"}, headers={
            "Host": host, "Coder-Session-Token": TOKEN, "Authorization": "Bearer app-own", "X-Custom": "yes",
            "Cookie": f"coder_session_token={TOKEN}; theme=dark; coder_signed_app_token=s; "
                      "coder_subdomain_app_session_token_ab=x; coder_path_app_session_token=y"})
    assert r.status_code == 200, r.text
    got = r.json()
    headers = dict(got["headers"])
    assert got["path"] == "/demo/hand-made/ccw/status" and got["query"] == f"coder_session_token={TOKEN}&a=1"
    assert headers["coder-session-token"] == TOKEN  # Coder forwards the header: never send it to an app
    assert headers["authorization"] == "Bearer app-own" and headers["x-custom"] == "yes"
    assert headers["cookie"] == "theme=dark" and headers["host"] == host


async def test_only_the_cookie_gets_through_stripped_to_nothing(emulator):
    async with listening(emulator) as client:
        r = await client.post(f"{HAND_MADE}/message", json={}, headers={"Cookie": f"coder_session_token={TOKEN}"})
        assert r.status_code == 200, r.text  # a cookie alone authenticates a POST: CSRF is only for /api
        assert TOKEN not in r.text and dict(r.json()["headers"])["cookie"] == ""  # Go adds the stripped header back
        await client.post("/emulator/reset", json={})
        assert (await client.get("/emulator/app-listener")).json() == {"url": None}  # a reset forgets it
        r = await client.get(f"{HAND_MADE}/status", headers={"Cookie": f"coder_session_token={TOKEN}"})
    assert r.json()["status"] == "stable"  # AgentAPI itself again


def cookie_for(form: str) -> str:
    if form == "path":
        return "coder_path_app_session_token"
    return "coder_subdomain_app_session_token_" + hashlib.sha256(WILDCARD.encode()).digest()[:16].hex()


@pytest.mark.parametrize("form", ["path", "subdomain"])
async def test_an_app_request_is_authenticated_where_coder_reads_its_token(emulator, form):
    emulator.backend.wildcard_hostname = WILDCARD
    url, host = (f"{HAND_MADE}/status", "coder.test") if form == "path" else ("/status", HOST)
    other = cookie_for("subdomain" if form == "path" else "path")
    accepted = [({"Cookie": f"coder_session_token={TOKEN}"}, {}), ({"Cookie": f"{cookie_for(form)}={TOKEN}"}, {}),
                ({"Coder-Session-Token": TOKEN}, {}), ({"Authorization": f"Bearer {TOKEN}"}, {}),
                ({}, {"coder_session_token": TOKEN}), ({}, {"access_token": TOKEN})]
    refused: list[tuple[dict[str, str], dict[str, str]]] = [({"Cookie": f"{other}={TOKEN}"}, {}), ({"Cookie": f"session={TOKEN}"}, {}), ({"X-Token": TOKEN}, {})]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test") as c:
        for headers, params in accepted:
            assert (await c.get(url, headers={"Host": host, **headers}, params=params)).status_code == 200, headers
        for headers, params in refused:
            assert (await c.get(url, headers={"Host": host, **headers}, params=params)).status_code == 303, headers


async def test_the_runner_forward_passes_credentials_on_as_coder_does():
    fake = SimpleNamespace(app=Starlette(routes=[Route("/{rest:path}", echo)]))
    async with running(fake) as url, httpx.AsyncClient() as client:  # type: ignore[arg-type]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "query_string": b"", "headers": [
            (b"coder-session-token", b"t"), (b"authorization", b"Bearer b"), (b"cookie", b"theme=dark"),
            (b"connection", b"keep-alive")]}
        await RunnerForward(client, url, "/state")(scope, receive, send)
    got = dict(httpx.Response(200, content=sent[-1]["body"]).json()["headers"])
    assert (got["coder-session-token"], got["authorization"], got["cookie"]) == ("t", "Bearer b", "theme=dark")


async def test_an_api_write_with_the_cookie_needs_the_same_token_beside_it(coder):
    """Coder's CSRF check, under /api only: why the fleet never sends its API requests the cookie."""
    stop = {"transition": "stop"}
    ws = (await coder.get("/api/v2/users/me/workspace/hand-made")).json()
    builds = f"/api/v2/workspaces/{ws['id']}/builds"
    alone = await coder.post(builds, json=stop, headers={"Coder-Session-Token": "", "Cookie": f"coder_session_token={TOKEN}"})
    assert alone.status_code == 400 and alone.text.startswith("Something is wrong with your CSRF token")
    other = await coder.post(builds, json=stop, headers={"Cookie": "coder_session_token=another-token"})
    assert other.status_code == 400 and other.text.startswith("CSRF error encountered")
    read = await coder.get(f"/api/v2/workspaces/{ws['id']}",
                           headers={"Coder-Session-Token": "", "Cookie": f"coder_session_token={TOKEN}"})
    assert read.status_code == 200  # reads are never checked
    same = await coder.post(builds, json=stop, headers={"Cookie": f"coder_session_token={TOKEN}"})
    assert same.status_code == 201, same.text
