"""FLEET_MCP_LOG_LEVEL: what the server logs on stderr (stdout stays MCP's), checked when it starts."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.processes import WAIT_S, clean_env, fleet_command

pytestmark = pytest.mark.system

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def serve_once(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The server over stdio against its emulator: one initialize, then stdin ends and it stops."""
    return subprocess.run([*fleet_command(), "--emulator"], input=json.dumps(INIT) + "\n", capture_output=True, text=True,
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


def call(id_: int, tool: str, **arguments: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_every_stderr_line_is_in_the_readmes_format_fastmcps_own_included(tmp_path, level):
    """Tools that error (arguments FastMCP refuses, an agent not found): FastMCP logs each, and every line on
    stderr is `LEVEL logger: message` as the README's Logs section says (no Rich columns, dates or wrapping)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "one line a record, `LEVEL logger: message`" in readme
    line = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.-]+: \S")
    calls = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call(2, "create_agent", name="x"),
             call(3, "show_agent", agent_name="missing")]
    done = subprocess.run([*fleet_command(), "--emulator"], input="".join(json.dumps(c) + "\n" for c in calls),
                          capture_output=True, text=True, timeout=WAIT_S, env=clean_env(FLEET_MCP_LOG_LEVEL=level),
                          cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(answer)["id"] for answer in done.stdout.splitlines()) == [1, 2, 3]
    assert "WARNING fastmcp.server.server: Invalid arguments for tool 'create_agent'" in done.stderr
    assert "fastmcp.server.server: Error calling tool 'show_agent'" in done.stderr
    lines = done.stderr.splitlines()
    assert [text for text in lines if not line.match(text) or "\x1b" in text] == [], done.stderr
