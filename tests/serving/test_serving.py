"""`fleet-mcp` as a real process: stdio and HTTP with the official `mcp` client in both
protocol eras, a clean stdout, a clean stop, and one clear line for each start-up failure."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from fleet_mcp import __version__
from tests.processes import WAIT_S, Lines, clean_env, fleet_command, free_port, http_server, pipes, refusal
from tests.support import TOOLS, emulator_thread, first_text

pytestmark = pytest.mark.system

ERAS = {"initialize": "2025-11-25", "discover": "2026-07-28"}
SECRET = "s3cr3t-t0ken-do-not-print"


async def tour(session: ClientSession, era: str) -> None:
    """The same calls in either era: what an orchestrator does first."""
    await getattr(session, era)()
    assert session.protocol_version == ERAS[era]
    assert session.server_info is not None
    assert (session.server_info.name, session.server_info.version) == ("fleet-mcp", __version__)
    assert {t.name for t in (await session.list_tools()).tools} == TOOLS
    projects = await session.call_tool("list_agent_projects", {})
    assert not projects.is_error
    assert [p["name"] for p in projects.structured_content["projects"]] == ["fleet-demo", "fleet-research"]
    created = await session.call_tool("create_agent", {"name": "scout", "project": "fleet-demo",
                                                       "spec": "Map the repository. [[finish:1]]"})
    assert not created.is_error, created.content
    assert created.structured_content["agent"]["name"] == "scout"
    listed = await session.call_tool("list_agents", {})
    assert [a["name"] for a in listed.structured_content["agents"]] == ["scout"]
    missing = await session.call_tool("show_agent", {"agent_name": "ghost"})
    assert missing.is_error
    envelope = json.loads(first_text(missing.content))
    assert set(envelope) == {"error", "message", "details"} and envelope["error"] == "not_found"


# --- stdio ----------------------------------------------------------------------

@pytest.mark.parametrize("era", ERAS)
async def test_stdio_serves_the_tools_in_both_eras(era):
    with tempfile.TemporaryFile("w+") as errlog:
        params = StdioServerParameters(command=(fleet := fleet_command())[0], args=[*fleet[1:], "--emulator"], env=clean_env())
        async with (asyncio.timeout(WAIT_S), stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session):
            await tour(session, era)
        errlog.seek(0)
        assert "serving the fleet of demo" in errlog.read()  # logs go to stderr


def test_stdio_stdout_carries_nothing_but_protocol():
    proc = subprocess.Popen([*fleet_command(), "--emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    stdin, stdout = pipes(proc)
    assert proc.stderr is not None
    out, err = Lines(stdout), Lines(proc.stderr)
    requests = [
        ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "by-hand", "version": "0"}}),
        ("tools/list", {}),
        ("tools/call", {"name": "create_agent", "arguments": {"name": "hand", "project": "fleet-demo",
                                                              "spec": "By hand."}}),
        ("tools/call", {"name": "show_agent", "arguments": {"agent_name": "ghost"}}),  # logged as an error
    ]
    answers = []
    try:
        for i, (method, params) in enumerate(requests, 1):
            stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
            if method == "initialize":
                stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
            stdin.flush()
            while True:  # notifications may come first; every line must be JSON-RPC
                message = json.loads(out.line())
                assert message["jsonrpc"] == "2.0"
                if message.get("id") == i:
                    answers.append(message)
                    break
        stdin.close()  # EOF ends a stdio server
        trailing = out.rest()
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    for line in trailing:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert answers[0]["result"]["serverInfo"]["name"] == "fleet-mcp"
    assert {t["name"] for t in answers[1]["result"]["tools"]} == TOOLS
    assert not answers[2]["result"].get("isError")
    assert answers[3]["result"]["isError"] is True
    logs = "".join(err.rest())
    assert "serving the fleet of demo" in logs and "Error calling tool 'show_agent'" in logs
    assert proc.returncode == 0


# --- HTTP on a real socket --------------------------------------------------------

def test_http_serves_both_eras_and_stops_cleanly_on_sigterm(tmp_path):
    with http_server(tmp_path) as server:
        asyncio.run(http_sessions(server.url))
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(WAIT_S)
    assert code == 0, server.logs()
    assert "Traceback" not in server.logs()


async def http_sessions(url: str) -> None:
    for era, drive in (("initialize", tour), ("discover", tour_again)):
        async with (asyncio.timeout(WAIT_S), streamable_http_client(url) as (read, write),
                    ClientSession(read, write) as session):
            await drive(session, era)


async def tour_again(session: ClientSession, era: str) -> None:
    """The second session finds the first one's agent: one server, one fleet."""
    await getattr(session, era)()
    assert session.protocol_version == ERAS[era]
    assert {t.name for t in (await session.list_tools()).tools} == TOOLS
    listed = await session.call_tool("list_agents", {})
    assert [a["name"] for a in listed.structured_content["agents"]] == ["scout"]
    shown = await session.call_tool("show_agent", {"agent_name": "scout"})
    assert not shown.is_error and shown.structured_content["agent"]["project"] == "fleet-demo"
    missing = await session.call_tool("show_agent", {"agent_name": "ghost"})
    assert missing.is_error and json.loads(first_text(missing.content))["error"] == "not_found"


# --- start-up failures --------------------------------------------------------------

@pytest.fixture(scope="module")
def coder_url() -> Iterator[str]:
    """An emulator on a real socket whose token is not SECRET."""
    with emulator_thread("the-right-token") as emulated:
        yield emulated.url


@pytest.mark.parametrize(("cause", "expected"), [
    ("missing settings", "missing setting CODER_URL, CODER_SESSION_TOKEN"),
    ("Coder unreachable", "cannot reach Coder at CODER_URL=http://127.0.0.1:"),
    ("token refused", "Coder refused CODER_SESSION_TOKEN"),
    ("invalid URL", "invalid setting CODER_URL"),
    ("blank token", "invalid setting CODER_SESSION_TOKEN"),
])
def test_startup_failure_is_exit_2_and_one_line(request, tmp_path, cause, expected):
    if cause == "missing settings":
        env = {}
    elif cause == "blank token":
        env = {"CODER_URL": "https://coder.example.com", "CODER_SESSION_TOKEN": "   "}
    else:
        url = {"Coder unreachable": f"http://127.0.0.1:{free_port()}",  # nothing listens there
               "token refused": "coder_url", "invalid URL": "ftp://coder.example.com"}[cause]
        env = {"CODER_URL": request.getfixturevalue(url) if url == "coder_url" else url,
               "CODER_SESSION_TOKEN": SECRET}
    # A temp cwd: no .env of the developer's is read.
    done = subprocess.run(fleet_command(), env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True,
                          timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    line = refusal(done)
    assert line.startswith("fleet-mcp: ") and expected in line, line
    assert SECRET not in done.stderr


def runner_processes(parent: int) -> list[int]:
    """PIDs of the `fleet-mcp runner` processes that `parent` started (each a relay to the runner forked in its
    process group: emulator/forks.py)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/status") as f:
                ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration):
            continue
        if ppid == parent and b"fleet_mcp.runner.program" in argv:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


@pytest.mark.skipif(importlib.util.find_spec("claude_agent_sdk") is None,
                    reason="claude-agent-sdk is not installed (pip install -e '.[runner]')")
def test_the_emulator_with_real_agents(tmp_path):
    """`fleet-mcp --emulator --agent-runtime runner`: real Claude Code agents; they stop with the server."""
    async def drive(url: str) -> None:
        async with (asyncio.timeout(90), streamable_http_client(url) as (read, write),
                    ClientSession(read, write) as session):
            await session.initialize()
            made = await session.call_tool("create_agent", {"name": "real", "project": "fleet-demo",
                                                            "spec": "Write the notes"})
            assert not made.is_error, made.content
            waited = await session.call_tool("wait_for_agents", {"agent_names": ["real"], "timeout_s": 60})
            assert waited.structured_content["met"] == ["real"], waited.structured_content
            shown = (await session.call_tool("show_agent", {"agent_name": "real"})).structured_content["agent"]
            assert (shown["driver"], shown["status"]) == ("runner", "idle") and shown["total_cost_usd"] > 0

    with http_server(tmp_path, "--agent-runtime", "runner", real=True) as server:
        asyncio.run(drive(server.url))
        runners = runner_processes(server.proc.pid)
        assert runners  # one per running workspace of a fleet template: the new agent's and the seed's
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(WAIT_S) == 0, server.logs()
    assert not any(alive(pid) for pid in runners)  # the agents stopped with the server
