"""The first minutes of a user (issue 16): the version, one line and exit 2 for every start-up failure (the
server and `doctor` alike, Coder's network failures told apart), the 401 a token-less client gets, and --help."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from fleet_mcp import __version__
from fleet_mcp.settings import Settings
from fleet_mcp.settings_help import env_name
from tests.processes import WAIT_S, clean_env, fleet_command, free_port, http_server

pytestmark = pytest.mark.system

SECRET = "s3cr3t-t0ken-do-not-print"
PASSWORD = "hunter2-pa55word"


def one_line_exit_2(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([*fleet_command(), *args], env=clean_env(**env), cwd=cwd, capture_output=True, text=True,
                          timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no server log line before or after it
    assert lines[0].startswith("fleet-mcp: "), lines[0]
    assert SECRET not in done.stderr and PASSWORD not in done.stderr
    return lines[0]


def test_version():
    done = subprocess.run([*fleet_command(real=True), "--version"], capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"fleet-mcp {__version__}"


def test_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_exit_2(["--emulator", "--transport", "http", "--port", str(port)], {}, tmp_path)
    assert f"cannot listen on 127.0.0.1:{port}: port {port} is already in use" in line
    assert "--port" in line


@pytest.mark.parametrize(("env", "expected"), [
    ({"FLEET_MCP_REQUEST_TIMEOUT_S": "-1"}, "invalid setting FLEET_MCP_REQUEST_TIMEOUT_S"),
    ({"FLEET_MCP_POLL_INTERVAL_S": "soon"}, "invalid setting FLEET_MCP_POLL_INTERVAL_S"),
    ({"FLEET_MCP_APP_SLUG": ""}, "invalid setting FLEET_MCP_APP_SLUG"),
    ({"CODER_URL": f"https://admin:{PASSWORD}@coder.example.com"}, "must not carry a user name or password"),
    ({"FLEET_MCP_ALLOWED_HOSTS": "fleet.example.com,*"}, "invalid setting FLEET_MCP_ALLOWED_HOSTS: '*' would turn"),
], ids=["timeout", "poll", "slug", "userinfo", "allowed-hosts-star"])
def test_a_bad_setting_names_the_variable_the_user_sets(tmp_path, env, expected):
    env = {"CODER_URL": "https://coder.example.com", "CODER_SESSION_TOKEN": SECRET, **env}
    assert expected in one_line_exit_2([], env, tmp_path)


def test_every_setting_has_the_name_a_user_sets():
    names = {env_name(field) for field in Settings.model_fields}
    assert {"CODER_URL", "CODER_SESSION_TOKEN", "FLEET_MCP_APP_SLUG", "FLEET_MCP_REQUEST_TIMEOUT_S"} <= names
    assert all(name.startswith(("CODER_", "FLEET_MCP_")) for name in names)


# --- Coder's network failures, told apart ------------------------------------------

@contextmanager
def tcp_server(answer: bytes | None) -> Iterator[int]:
    """A loopback server that writes `answer` to each connection, or never answers (None)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.sendall(answer)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("command", [[], ["doctor"]], ids=["server", "doctor"])
@pytest.mark.parametrize("failure", ["refused", "dns", "tls", "timeout"])
def test_network_failures_are_told_apart(tmp_path, command, failure):
    env = {"CODER_SESSION_TOKEN": SECRET, "FLEET_MCP_REQUEST_TIMEOUT_S": "0.5"}
    expected = {"refused": "connection refused; is Coder running there",
                "dns": "host name not found; check the host name in CODER_URL",
                "tls": "TLS handshake failed", "timeout": "timed out; is the host reachable"}[failure]
    if failure == "refused":
        line = one_line_exit_2(command, {**env, "CODER_URL": f"http://127.0.0.1:{free_port()}"}, tmp_path)
    elif failure == "dns":
        line = one_line_exit_2(command, {**env, "CODER_URL": "http://no-such-host.invalid"}, tmp_path)
    else:
        with tcp_server(b"HTTP/1.1 400 Bad Request\r\n\r\n" if failure == "tls" else None) as port:
            scheme = "https" if failure == "tls" else "http"
            line = one_line_exit_2(command, {**env, "CODER_URL": f"{scheme}://127.0.0.1:{port}"}, tmp_path)
    assert expected in line, line
    assert line.count("cannot reach Coder") == 1


# --- HTTP with a token: what a client without it is told ---------------------------

def test_a_client_without_the_token_is_told_which_header_to_send(tmp_path):
    with http_server(tmp_path, env=clean_env(FLEET_MCP_AUTH_TOKEN=SECRET)) as server:
        answer = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=WAIT_S)
        assert answer.status_code == 401
        assert "Authorization: Bearer" in answer.json()["message"]
        assert "FLEET_MCP_AUTH_TOKEN" in answer.json()["message"]
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and "Authorization: Bearer" in challenge
        assert "resource_metadata" not in challenge
        base = server.url.removesuffix("/mcp")
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
                     "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
            found = httpx.get(base + path, timeout=WAIT_S)
            assert found.status_code == 404, path
            assert "no OAuth" in found.json()["message"]


def test_the_server_never_imports_httpx_own_command_line_client():
    """httpx imports its CLI (click, rich, pygments: 15-20 ms of start-up) whenever they are installed; the
    server's process never runs it, and httpx still offers its `main` (the fallback that names the extra)."""
    probe = ("import sys; from fleet_mcp.cli import main; from fleet_mcp.serving import preflight; "
             "import fleet_mcp.server, httpx; "
             "print(sys.modules['httpx._main'] is None, 'pygments' in sys.modules, callable(httpx.main))")
    done = subprocess.run([sys.executable, "-c", probe], env=clean_env(), capture_output=True, text=True,
                          timeout=WAIT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"]


@pytest.mark.parametrize("env", [{}, {"CODER_URL": "http://127.0.0.1:9", "CODER_SESSION_TOKEN": SECRET}],
                         ids=["bad-settings", "coder-unreachable"])
def test_a_server_refusing_to_start_over_stdio_never_imports_fastmcp(tmp_path, env):
    """FastMCP (with the MCP types) is most of a server's start-up, a second or two of CPU: a refusal, which
    serves nothing, says its one line without it."""
    probe = ("import sys; from fleet_mcp.cli import main; code = main([]); "
             "print(code, 'fastmcp' in sys.modules, 'mcp_types' in sys.modules, file=sys.stdout)")
    done = subprocess.run([sys.executable, "-c", probe], env=clean_env(**env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.stdout.split() == ["2", "False", "False"], (done.stdout, done.stderr)
    assert done.stderr.startswith("fleet-mcp: ") and SECRET not in done.stderr


# --- --help ----------------------------------------------------------------------------

def test_help_lists_the_settings_and_exit_codes():
    done = subprocess.run([*fleet_command(real=True), "--help"], capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 0
    for field in Settings.model_fields:
        assert env_name(field) in done.stdout, env_name(field)
    assert "exit codes:" in done.stdout and "  2  could not start" in done.stdout
    doctor = subprocess.run([*fleet_command(real=True), "doctor", "--help"], capture_output=True, text=True, timeout=WAIT_S,
                            check=False)
    assert doctor.returncode == 0
    assert "CODER_URL" in doctor.stdout and "exit codes:" in doctor.stdout
    assert all(f"  {code}  " in doctor.stdout for code in (0, 1, 2))


def test_the_settings_reference_lists_every_setting():
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in readme.splitlines() if line.startswith("| `")}
    assert {env_name(field) for field in Settings.model_fields} <= rows
