"""FLEET_MCP_LOG_LEVEL: what the server logs on stderr (stdout stays MCP's), checked when it starts."""

from __future__ import annotations

import json
import subprocess

import pytest
from processes import SERVER, WAIT_S, clean_env

pytestmark = pytest.mark.system

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def serve_once(tmp_path, **env: str) -> subprocess.CompletedProcess:
    """The server over stdio against its emulator: one initialize, then stdin ends and it stops."""
    return subprocess.run([*SERVER, "--emulator"], input=json.dumps(INIT) + "\n", capture_output=True, text=True,
                          timeout=WAIT_S, env=clean_env(**env), cwd=tmp_path, check=False)


@pytest.mark.parametrize(("level", "says_serving"), [(None, True), ("info", True), ("WARNING", False),
                                                     ("error", False)])
def test_the_level_decides_what_reaches_stderr(tmp_path, level, says_serving):
    done = serve_once(tmp_path, **({"FLEET_MCP_LOG_LEVEL": level} if level else {}))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["serverInfo"]["name"] == "fleet-mcp"  # stdout is MCP's alone
    assert ("INFO fleet_mcp: serving the fleet of demo" in done.stderr) is says_serving, done.stderr
    assert ("Starting MCP server" in done.stderr) is says_serving, done.stderr  # FastMCP's own lines too


def test_debug_shows_the_mcp_sdks_lines(tmp_path):
    done = serve_once(tmp_path, FLEET_MCP_LOG_LEVEL="DEBUG")
    assert done.returncode == 0, done.stderr
    assert "DEBUG mcp.server" in done.stderr and "demo-token" not in done.stderr  # secrets stay redacted at any level


def test_an_unknown_level_is_one_line_and_exit_2(tmp_path):
    done = serve_once(tmp_path, FLEET_MCP_LOG_LEVEL="loud")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("fleet-mcp: invalid setting FLEET_MCP_LOG_LEVEL"), done.stderr
