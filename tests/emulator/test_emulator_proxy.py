"""Coder's workspace app proxy in the emulator: path and subdomain forms, Coder's HTML failures, through HTTP."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support import ALICE_TOKEN, TOKEN, client_for, create_workspace

HAND_MADE = "/@demo/hand-made/apps/ccw"  # seeded: demo's fleet-template workspace, AgentAPI idle
SIGNED_OUT = "You are signed out or your session has expired. Please sign in again to continue."
APP_HOST = "apps.emulator.test"


def assert_page(r: httpx.Response, status: int, title: str, text: str = "") -> None:
    """One of Coder's static HTML error pages."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert f"<title>{status} - {title}</title>" in r.text
    assert html.escape(text, quote=False) in r.text.replace("&#34;", '"')
    assert r.headers["x-coder-build-version"]


async def fleet_workspace(coder: httpx.AsyncClient, name: str, spec: str = "Build it [[finish:2]]") -> dict[str, Any]:
    r = await create_workspace(coder, name, params={"fleet_mcp_managed": "true", "fleet_mcp_agent_spec": spec})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def build(coder: httpx.AsyncClient, ws: dict[str, Any], transition: str) -> None:
    r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": transition})
    assert r.status_code == 201, r.text


async def test_path_form_reaches_agentapi_with_any_token_form(coder, emulator):
    r = await coder.get(HAND_MADE + "/status")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert {k: r.json()[k] for k in ("status", "agent_type", "transport")} == {
        "status": "stable", "agent_type": "claude", "transport": "pty"}
    assert r.headers["x-coder-build-version"] == emulator.backend.version
    assert (await coder.get("/@demo/hand-made.main/apps/ccw/status")).status_code == 200  # agent part
    assert (await coder.get("/%40demo/hand-made/apps/ccw/status")).status_code == 200  # encoded @
    assert (await coder.get("/@Demo/Hand-Made/apps/ccw/status")).status_code == 200  # names ignore case
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as bearer:
        assert (await bearer.get(HAND_MADE + "/status")).status_code == 200


async def test_at_me_is_refused(coder):
    r = await coder.get("/@me/hand-made/apps/ccw/status")
    assert_page(r, 404, "Application Not Found", "Applications must be accessed with the full username, not @me.")


async def test_no_or_bad_token_redirects_to_login(emulator, conformance):
    for token in (None, "not-a-token"):
        async with client_for(emulator, conformance, token) as anonymous:
            r = await anonymous.get(HAND_MADE + "/status?x=1")
        assert r.status_code == 303
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        location = r.headers["location"]
        assert location.startswith("http://coder.test/login?")
        query = parse_qs(urlsplit(location).query)
        assert query == {"message": [SIGNED_OUT], "redirect": ["/@demo/hand-made/apps/ccw/status?x=1"]}
        assert "redirect=%2F%40demo%2Fhand-made%2Fapps%2Fccw%2Fstatus%3Fx%3D1" in location
        assert r.text == f'<a href="{location.replace("&", "&amp;")}">See Other</a>.\n\n'


async def test_stopped_workspace_is_offline_even_without_a_token(coder, emulator, conformance):
    ws = await fleet_workspace(coder, "sleepy")
    emulator.advance(10)
    assert (await coder.get("/@demo/sleepy/apps/ccw/status")).status_code == 200
    await build(coder, ws, "stop")
    r = await coder.get("/@demo/sleepy/apps/ccw/status")  # the stop build is queued: already offline
    assert_page(r, 400, "Workspace Offline", 'Last workspace transition was to the "stop" state.')
    emulator.advance(5)
    assert_page(await coder.get("/@demo/sleepy/apps/ccw/status"), 400, "Workspace Offline")
    async with client_for(emulator, conformance, None) as anonymous:  # Coder looks the app up first
        assert_page(await anonymous.get("/@demo/sleepy/apps/ccw/status"), 400, "Workspace Offline")


async def test_agent_not_connected_is_unavailable(coder, emulator):
    await fleet_workspace(coder, "early")
    assert_page(await coder.get("/@demo/early/apps/ccw/status"), 404, "Application Not Found")  # no agent yet
    emulator.advance(2.0)  # build done, agent still connecting
    r = await coder.get("/@demo/early/apps/ccw/status")
    assert_page(r, 404, "Application Unavailable", 'Agent state is "connecting", not "connected"')


async def test_agentapi_not_up_is_bad_gateway(coder, emulator):
    await fleet_workspace(coder, "booting")
    emulator.advance(2.5)  # agent connected, startup script still running: AgentAPI not listening
    r = await coder.get("/@demo/booting/apps/ccw/status")
    assert_page(r, 502, "Bad Gateway", "Failed to proxy request to application: dial tcp 127.0.0.1:3284")
    emulator.advance(2)
    assert (await coder.get("/@demo/booting/apps/ccw/status")).status_code == 200


async def test_agentapi_process_down_is_bad_gateway_until_started_again(coder, emulator):
    r = await coder.post("/emulator/agents/hand-made/process", json={"running": False})
    assert r.json() == {"running": False}
    assert_page(await coder.get(HAND_MADE + "/status"), 502, "Bad Gateway")
    await coder.post("/emulator/agents/hand-made/process", json={"running": True})
    assert (await coder.get(HAND_MADE + "/status")).status_code == 200


async def test_unknown_app_workspace_or_owner_is_not_found(coder):
    text = "The application or workspace you are trying to access does not exist"
    for path in ("/@demo/hand-made/apps/nope/status", "/@demo/nowhere/apps/ccw/status",
                 "/@nobody/hand-made/apps/ccw/status"):
        assert_page(await coder.get(path), 404, "Application Not Found", text)


async def test_an_app_with_nothing_behind_it_is_bad_gateway(coder):
    assert_page(await coder.get("/@demo/dev-box/apps/code-server/"), 502, "Bad Gateway")


async def test_other_users_path_apps_are_not_found_even_for_a_site_owner(coder, alice):
    r = await coder.get("/@alice/alice-agent/apps/ccw/status")  # demo is the site owner
    assert_page(r, 404, "Application Not Found", 'path-based apps with "owner" share level are only accessible')
    assert_page(await alice.get(HAND_MADE + "/status"), 404, "Application Not Found")
    assert (await alice.get("/@alice/alice-agent/apps/ccw/status")).status_code == 200


async def test_path_apps_disabled_is_403(coder):
    r = await coder.post("/emulator/app-proxy", json={"disable_path_apps": True})
    assert r.json() == {"wildcard_hostname": "", "disable_path_apps": True}
    r = await coder.get(HAND_MADE + "/status")
    assert_page(r, 403, "Forbidden", "Path-based applications are disabled on this Coder deployment by the "
                "administrator.")
    await coder.post("/emulator/app-proxy", json={"disable_path_apps": False})
    assert (await coder.get(HAND_MADE + "/status")).status_code == 200


async def test_app_root_without_slash_redirects_to_add_it(coder):
    r = await coder.get(HAND_MADE + "?folder=x")
    assert r.status_code == 307 and r.headers["location"] == HAND_MADE + "/"  # Coder keeps only the path
    assert r.text == f'<a href="{HAND_MADE}/">Temporary Redirect</a>.\n\n'
    r = await coder.get(HAND_MADE + "/")  # AgentAPI's own root sends browsers to its chat
    assert r.status_code == 307 and r.headers["location"].endswith("/apps/ccw/chat/embed")


async def test_subdomain_form(emulator, coder, conformance):
    r = await coder.post("/emulator/app-proxy", json={"wildcard_hostname": f"*.{APP_HOST}"})
    assert r.json()["wildcard_hostname"] == f"*.{APP_HOST}"
    regions = (await coder.get("/api/v2/regions")).json()["regions"]
    assert regions[0]["wildcard_hostname"] == f"*.{APP_HOST}"

    def on_host(host: str, token: str | None = TOKEN) -> httpx.AsyncClient:
        headers = {"Coder-Session-Token": token} if token else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url=f"http://{host}",
                                 headers=headers)

    for host in (f"ccw--hand-made--demo.{APP_HOST}", f"ccw--main--hand-made--demo.{APP_HOST}"):
        async with on_host(host) as app:
            r = await app.get("/status")
            assert r.status_code == 200 and r.json()["status"] == "stable"
    async with on_host(f"ccw--hand-made--demo.{APP_HOST}", None) as app:
        r = await app.get("/status")
    assert r.status_code == 303
    assert r.headers["location"] == ("/api/v2/applications/auth-redirect?redirect_uri=http%3A%2F%2F"
                                     f"ccw--hand-made--demo.{APP_HOST}%2Fstatus")
    async with on_host(f"ccw--alice-agent--alice.{APP_HOST}") as app:  # a site owner may, by subdomain
        assert (await app.get("/status")).status_code == 200
    async with on_host(f"ccw--alice-agent--alice.{APP_HOST}", ALICE_TOKEN) as app:
        assert (await app.get("/status")).status_code == 200
    async with on_host(f"ccw--hand-made--demo.{APP_HOST}", ALICE_TOKEN) as app:
        assert_page(await app.get("/status"), 404, "Application Not Found")
    async with on_host(f"not_an_app.{APP_HOST}") as app:
        assert_page(await app.get("/status"), 400, "Invalid Application URL")
    await coder.post("/emulator/app-proxy", json={"disable_path_apps": True})
    async with on_host(f"ccw--hand-made--demo.{APP_HOST}") as app:  # path apps off: subdomains still work
        assert (await app.get("/status")).status_code == 200
    assert (await coder.get("/api/v2/buildinfo")).status_code == 200  # other hosts: the API as before


async def test_requests_counted_per_route_pattern(coder):
    await coder.delete("/emulator/requests")
    for path in ("/@demo/hand-made/apps/ccw/status", "/@demo/hand-made.main/apps/ccw/status",
                 "/@demo/hand-made/apps/ccw/messages", "/@demo/hand-made/apps/ccw/chat/x", "/@me/x/apps/ccw/status"):
        await coder.get(path)
    await coder.post(HAND_MADE + "/message", json={"content": "\r", "type": "raw"})
    routes = (await coder.get("/emulator/requests")).json()["routes"]
    assert routes == {"GET /@{owner}/{workspace}/apps/{slug}/status": 3,
                      "GET /@{owner}/{workspace}/apps/{slug}/messages": 1,
                      "GET /@{owner}/{workspace}/apps/{slug}/{path}": 1,
                      "POST /@{owner}/{workspace}/apps/{slug}/message": 1}


async def test_rate_limited_per_user(coder, emulator):
    await coder.post("/emulator/rate-limit", json={"enabled": True})
    # Coder answers its own JSON 429 here, not AgentAPI's: a client without the AgentAPI conformance check.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                                 headers={"Coder-Session-Token": TOKEN}) as c:
        for _ in range(512):
            assert (await c.get(HAND_MADE + "/status")).status_code == 200
        r = await c.get(HAND_MADE + "/status")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.json()["message"].startswith("You've been rate limited")
        assert (await c.get(HAND_MADE + "/messages")).status_code == 200  # per path, as Coder


async def test_deleted_workspace_is_not_found(coder, emulator):
    ws = await fleet_workspace(coder, "doomed")
    emulator.advance(10)
    await build(coder, ws, "delete")
    emulator.advance(5)
    assert_page(await coder.get("/@demo/doomed/apps/ccw/status"), 404, "Application Not Found")
    assert_page(await coder.get(f"/@demo/{ws['id']}/apps/ccw/status"), 404, "Application Not Found")
