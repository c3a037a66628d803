"""`fleet-mcp --transport http` safe by default: loopback unless FLEET_MCP_AUTH_TOKEN is set, then a
bearer token on every request (constant-time check, 401 otherwise), Host and Origin checks against DNS
rebinding, and a drain on shutdown; real processes, the official `mcp` client, plain HTTP for the rest."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr

from fleet_mcp.serving.http import Drain, Gate, allowed_hosts, refuse_bind
from tests.processes import INIT, MCP_HEADERS, WAIT_S, clean_env, fleet_command, http_server, refusal
from tests.support import fleet_settings

pytestmark = pytest.mark.system

TOKEN = "fleet-http-t0ken-never-logged"
ALLOWED = "fleet.example"


def post_initialize(url: str, **headers: str) -> httpx.Response:
    return httpx.post(url, json=INIT, headers={**MCP_HEADERS, **headers}, timeout=WAIT_S)


# --- the bind address ------------------------------------------------------------------

@pytest.mark.parametrize(("host", "refused"), [
    ("127.0.0.1", False), ("localhost", False), ("::1", False), ("[::1]", False), ("127.0.0.2", False),
    ("0.0.0.0", True), ("::", True), ("192.168.1.20", True), ("fleet.example", True),
])
def test_only_loopback_binds_without_a_token(host, refused):
    assert (refuse_bind(host, fleet_settings()) is not None) is refused
    assert refuse_bind(host, fleet_settings(auth_token=TOKEN)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_non_loopback_bind_without_token_is_exit_2_and_one_line(tmp_path, host):
    # Refused before Coder is contacted: nothing listens at this CODER_URL, and it does not matter.
    env = clean_env(CODER_URL="http://127.0.0.1:9", CODER_SESSION_TOKEN="coder-token")
    done = subprocess.run([*fleet_command(), "--transport", "http", "--host", host, "--port", "0"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    line = refusal(done)
    assert line.startswith(f"fleet-mcp: refusing to serve HTTP on {host}") and "FLEET_MCP_AUTH_TOKEN" in line


def test_the_bound_host_is_accepted_but_not_a_wildcard():
    assert allowed_hosts("10.1.2.3", fleet_settings(allowed_hosts="a.example")) == ["a.example", "10.1.2.3"]
    assert allowed_hosts("0.0.0.0", fleet_settings()) == []
    assert allowed_hosts("::", fleet_settings()) == []


# --- a token server on 0.0.0.0 ----------------------------------------------------------

@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    env = clean_env(FLEET_MCP_AUTH_TOKEN=TOKEN, FLEET_MCP_ALLOWED_HOSTS=ALLOWED)
    with http_server(tmp_path_factory.mktemp("token"), env=env, host="0.0.0.0") as server:
        yield server


@pytest.mark.parametrize(("authorization", "invalid"), [
    (None, False), ("Bearer wrong-token", True), (f"Bearer {TOKEN}x", True), (f"Basic {TOKEN}", False),
    ("Bearer", False), (f"bearer {TOKEN[:-1]}", True),
])
def test_without_the_right_bearer_token_401(token_server, authorization, invalid):
    headers = {"Authorization": authorization} if authorization else {}
    for answer in (post_initialize(token_server.url, **headers),
                   httpx.get(token_server.url, headers={"Accept": "text/event-stream", **headers}, timeout=WAIT_S)):
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert ('error="invalid_token"' in answer.headers["www-authenticate"]) is invalid
        body = answer.json()
        assert body["error"] == "unauthorized" and "Authorization: Bearer" in body["message"]
        assert TOKEN not in answer.text


def test_the_right_bearer_token_serves_both_eras(token_server):
    async def sessions() -> None:
        for era in ("initialize", "discover"):
            async with (asyncio.timeout(WAIT_S),
                        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT_S) as http,
                        streamable_http_client(token_server.url, http_client=http) as (read, write),
                        ClientSession(read, write) as session):
                await getattr(session, era)()
                projects = await session.call_tool("list_agent_projects", {})
                assert not projects.is_error
                assert [p["name"] for p in projects.structured_content["projects"]] == ["fleet-demo", "fleet-research"]

    asyncio.run(sessions())
    assert post_initialize(token_server.url, Authorization=f"bearer {TOKEN}").status_code == 200  # scheme: any case


def test_token_server_still_checks_host_and_origin(token_server):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert post_initialize(token_server.url, Host="evil.example", **bearer).status_code == 421
    assert post_initialize(token_server.url, Origin="http://evil.example", **bearer).status_code == 403
    assert post_initialize(token_server.url, Host=f"{ALLOWED}:{token_server.port}", **bearer).status_code == 200


def test_the_token_is_never_logged(token_server):
    assert post_initialize(token_server.url, Authorization=f"Bearer {TOKEN}").status_code == 200
    assert post_initialize(token_server.url, Authorization=f"Bearer {TOKEN}-wrong").status_code == 401
    logs = token_server.logs()
    assert "fleet_mcp.access" in logs  # requests are logged, without their headers
    assert TOKEN not in logs


# --- Host and Origin on a loopback server --------------------------------------------------

@pytest.fixture(scope="module")
def loopback_server(tmp_path_factory):
    with http_server(tmp_path_factory.mktemp("loopback"), env=clean_env(FLEET_MCP_ALLOWED_HOSTS=ALLOWED)) as server:
        yield server


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "192.168.1.20:{port}", "127.0.0.1.nip.io"])
def test_a_foreign_host_header_is_rejected(loopback_server, host):
    answer = post_initialize(loopback_server.url, Host=host.format(port=loopback_server.port))
    assert answer.status_code in (403, 421), answer.text
    assert "protocolVersion" not in answer.text


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "localhost", f"{ALLOWED}:{{port}}",
                                  ALLOWED])
def test_local_and_allow_listed_hosts_are_served(loopback_server, host):
    answer = post_initialize(loopback_server.url, Host=host.format(port=loopback_server.port))
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("origin", ["http://evil.example", "https://evil.example:{port}", "null",
                                    "http://fleet.example.evil.example", "http://192.168.1.20:{port}"])
def test_a_foreign_origin_is_403(loopback_server, origin):
    answer = post_initialize(loopback_server.url, Origin=origin.format(port=loopback_server.port))
    assert answer.status_code == 403, answer.text


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}", "http://localhost:5173",
                                    f"https://{ALLOWED}", f"http://{ALLOWED}:8443"])
def test_a_local_or_allow_listed_origin_is_served(loopback_server, origin):
    answer = post_initialize(loopback_server.url, Origin=origin.format(port=loopback_server.port))
    assert answer.status_code == 200, answer.text


# --- the Gate in process -----------------------------------------------------------------

async def test_gate_drain_ends_get_streams_and_refuses_new_requests():
    streamed = asyncio.Event()

    async def app(scope, receive, send):  # an SSE-like GET stream that ends when the client leaves
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: hi\n\n", "more_body": True})
        streamed.set()
        while (await receive())["type"] != "http.disconnect":
            pass

    drain = Drain()
    gate = Gate(app, token=SecretStr(TOKEN), drain=drain)
    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(message)

    async def receive():
        await asyncio.sleep(3600)  # the client never leaves

    scope = {"type": "http", "method": "GET", "path": "/mcp", "headers": [(b"authorization", f"Bearer {TOKEN}".encode())]}
    stream = asyncio.create_task(gate(scope, receive, send))
    await asyncio.wait_for(streamed.wait(), 5)
    drain.start()
    await asyncio.wait_for(stream, 5)
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}  # ended properly

    sent.clear()
    await gate({**scope, "method": "POST"}, receive, send)
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"])["error"] == "unavailable"
