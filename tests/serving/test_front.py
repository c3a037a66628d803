"""The HTTP front (issue 23 item 5): the start-up log names the MCP URL, `GET /` says where the endpoint is,
`GET /healthz` answers load balancers (no token, no Host check, no Coder call, nothing but ok), and unknown
FLEET_MCP_* variables are named in a start-up warning over both transports."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from fleet_mcp.serving.front import Health
from fleet_mcp.serving.http import Drain
from fleet_mcp.serving.preflight import known_variables, unknown_settings
from tests.processes import WAIT_S, Running, clean_env, emulator_process, fleet_command, http_server, per_user_server
from tests.support import TOKEN

pytestmark = pytest.mark.system

AUTH_TOKEN = "front-t0ken-of-the-server"
MISSPELT = "FLEET_MCP_MAX_AGENT"
WARNING = f"{MISSPELT} (in the environment) is not a fleet-mcp setting and is ignored; did you mean FLEET_MCP_MAX_AGENTS?"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = clean_env(FLEET_MCP_AUTH_TOKEN=AUTH_TOKEN, **{MISSPELT: "3"})
    with http_server(tmp_path_factory.mktemp("front"), env=env) as running:
        yield running


def root(running: Running) -> str:
    return running.url.removesuffix("/mcp")


def test_the_start_up_log_names_the_mcp_url_and_the_unknown_variable(server):
    logs = server.logs()
    assert f"MCP endpoint: http://127.0.0.1:{server.port}/mcp" in logs
    assert WARNING in logs


def test_healthz_is_ok_without_a_token_for_any_host_and_quiet(server):
    for headers in ({}, {"Host": "10.0.0.5:8000"}, {"Authorization": "Bearer wrong"}):
        answer = httpx.get(root(server) + "/healthz", headers=headers, timeout=WAIT_S)
        assert answer.status_code == 200, (headers, answer.text)
        assert answer.json() == {"status": "ok"}  # nothing beyond ok
    assert httpx.head(root(server) + "/healthz", timeout=WAIT_S).status_code == 200
    assert '"GET /healthz"' not in server.logs()  # probes every few seconds would drown the access log


def test_any_other_path_says_where_the_endpoint_is(server):
    """A client pointed at the server's root (or any path but /mcp) is told the endpoint, not a bare Not Found."""
    for method, path in (("POST", "/"), ("GET", "/sse"), ("POST", "/messages/"), ("DELETE", "/")):
        answer = httpx.request(method, root(server) + path, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                               timeout=WAIT_S)
        assert answer.status_code == 404, (method, path, answer.text)
        said = answer.json()
        assert said["error"] == "not_found" and said["details"]["mcp_endpoint"] == server.url
        assert f"fleet-mcp's MCP endpoint is {server.url}" in said["message"] and path not in said["message"][:30]


def test_root_says_where_the_endpoint_is(server):
    answer = httpx.get(root(server) + "/", timeout=WAIT_S)
    assert answer.status_code == 200
    said = answer.json()
    assert said["mcp_endpoint"] == server.url and said["health"] == "/healthz"
    assert f"claude mcp add --transport http fleet {server.url}" in said["message"]
    assert "FLEET_MCP_AUTH_TOKEN" in said["message"] and AUTH_TOKEN not in answer.text
    # The endpoint itself still needs the token.
    assert httpx.post(server.url, json={}, timeout=WAIT_S).status_code == 401


def test_a_misspelt_variable_is_warned_about_over_stdio_too(tmp_path):
    done = subprocess.run([*fleet_command(), "--emulator"], env=clean_env(FLEET_MCP_AUDIT_LOGS=str(tmp_path / "a.jsonl")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert ("FLEET_MCP_AUDIT_LOGS (in the environment) is not a fleet-mcp setting and is ignored; "
            "did you mean FLEET_MCP_AUDIT_LOG?") in done.stderr


def test_unknown_settings_reads_the_environment_and_dotenv_in_any_case(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("FLEET_MCP_PROGRES_INTERVAL_S=2\nFLEET_MCP_MAX_USERS=3\nfleet_mcp_zzz=1\n")
    warnings = unknown_settings({"fleet_mcp_max_agent": "3", "FLEET_MCP_APP_SLUG": "ccw", "FLEET_MCP_AUTH": "coder",
                                 "FLEET_MCP_CODER_TOKEN": "x", "PATH": "/bin"}, dotenv)
    assert warnings == [
        "FLEET_MCP_CODER_TOKEN (in the environment) is not a fleet-mcp setting and is ignored; "
        "did you mean CODER_SESSION_TOKEN?",
        f"FLEET_MCP_PROGRES_INTERVAL_S (in {dotenv}) is not a fleet-mcp setting and is ignored; "
        "did you mean FLEET_MCP_PROGRESS_INTERVAL_S?",
        "fleet_mcp_max_agent (in the environment) is not a fleet-mcp setting and is ignored; "
        "did you mean FLEET_MCP_MAX_AGENTS?",
        f"fleet_mcp_zzz (in {dotenv}) is not a fleet-mcp setting and is ignored (`fleet-mcp --help` lists the settings)",
    ]
    assert {"FLEET_MCP_APP_SLUG", "FLEET_MCP_AGENTAPI_APP_SLUG", "FLEET_MCP_AUTH"} <= set(known_variables())
    assert unknown_settings({name: "1" for name in known_variables()}, None) == []


def test_healthz_costs_coder_nothing_in_per_user_mode(tmp_path):
    with emulator_process() as coder, per_user_server(tmp_path, coder.url) as running, \
            httpx.Client(timeout=WAIT_S) as http:
        def coder_requests() -> int:
            total: int = http.get(coder.url + "/emulator/requests", headers={"Coder-Session-Token": TOKEN}).json()["total"]
            return total

        before = coder_requests()
        for n in range(20):
            answer = http.get(root(running) + "/healthz", headers={"Authorization": f"Bearer guess-{n}"})
            assert answer.status_code == 200 and answer.json() == {"status": "ok"}
        assert coder_requests() == before  # (the control API counts no requests of its own)
        # The same guess anywhere else is checked with Coder: the count above could have moved.
        assert http.get(root(running) + "/", headers={"Authorization": "Bearer guess-0"}).status_code == 401
        assert coder_requests() == before + 1
        said = http.get(root(running) + "/").json()
        assert "each caller's own Coder token" in said["message"]


async def test_healthz_says_503_once_draining():
    async def app(scope, receive, send):
        raise AssertionError("health checks never reach the app")

    drain = Drain()
    transport = httpx.ASGITransport(app=Health(app, drain))
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as http:
        assert (await http.get("/healthz")).status_code == 200
        drain.start()
        answer = await http.get("/healthz")
    assert answer.status_code == 503 and json.loads(answer.text) == {"status": "draining"}
