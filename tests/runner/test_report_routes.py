"""Which way app statuses reach Coder: through Coder's CLI (`coder exp mcp server`'s `coder_report_task`,
over the agent socket) where the workspace has it, else through the deprecated PATCH route. The runner's
reporter runs in-process against the emulator (as in `fleet-mcp runner`, whose log it writes to); the CLI is the
emulator's, as its runner workspaces get it."""

from __future__ import annotations

import asyncio
import html
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.runners.runtime import first_line, install_coder, spawn_forks
from fleet_mcp.runner.report import Reporter
from tests.runners import WAIT_S, served
from tests.support import TOKEN

pytestmark = pytest.mark.system  # the CLI is a process
WORKSPACE, SLUG = "dev-box", "code-server"
PATCH, RPC = "PATCH /api/v2/workspaceagents/me/app-status", "POST /api/v2/workspaceagents/me/rpc/{method}"
PR = "https://github.com/example/repo/pull/7"


@pytest.fixture(scope="module")
def coder() -> Iterator[httpx.Client]:
    with served(Emulator(token=TOKEN).app) as url, httpx.Client(base_url=url, timeout=10,
                                                              headers={"Coder-Session-Token": TOKEN}) as client:
        yield client


@pytest.fixture
def fresh(coder: httpx.Client) -> httpx.Client:
    assert coder.post("/emulator/reset").status_code == 200
    return coder


async def _statuses(coder: httpx.Client, count: int) -> list[tuple[str, str, str]]:
    """The app's statuses, oldest first, once there are `count` (the reporter runs on this event loop)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        ws = coder.get(f"/api/v2/users/me/workspace/{WORKSPACE}").json()
        app = next(a for a in ws["latest_build"]["resources"][0]["agents"][0]["apps"] if a["slug"] == SLUG)
        if len(app["statuses"]) >= count:
            return [(s["state"], html.unescape(s["message"]), s["uri"]) for s in reversed(app["statuses"])]
        assert time.monotonic() < deadline, f"waited for {count} statuses; got {app['statuses']}"
        await asyncio.sleep(0.05)


async def _report_a_turn(coder: httpx.Client) -> list[tuple[str, str, str]]:
    token = coder.get(f"/emulator/agents/{WORKSPACE}/token").json()["token"]
    reporter = Reporter(str(coder.base_url), token, SLUG)
    reporter.start()
    try:
        await reporter.route()  # the CLI started, or could not: until then statuses go with PATCH
        reporter.working("Ship it")
        reporter.finished(f"Opened {PR}", False, PR)
        return await _statuses(coder, 3)
    finally:
        await reporter.stop()


def _routes(coder: httpx.Client) -> dict[str, int]:
    routes = coder.get("/emulator/requests").json()["routes"]
    return {"patch": routes.get(PATCH, 0), "agent_api": routes.get(RPC, 0)}


TURN = [("working", "Ship it", ""), ("complete", f"Opened {PR}", PR), ("idle", f"Opened {PR}", PR)]


async def test_a_workspace_with_coders_cli_reports_through_it(fresh, tmp_path, monkeypatch):
    install_coder(tmp_path / "bin")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "bin"), os.environ["PATH"]]))
    assert await _report_a_turn(fresh) == TURN
    assert _routes(fresh) == {"patch": 0, "agent_api": 4}  # the CLI's ping, then the three statuses


async def test_without_the_cli_or_its_agent_socket_the_patch_reports(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not Path(p, "coder").exists()))
    assert await _report_a_turn(fresh) == TURN
    assert _routes(fresh) == {"patch": 3, "agent_api": 0}
    install_coder(tmp_path / "bin")  # now the CLI is there, but its agent socket does not answer
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "bin"), os.environ["PATH"]]))
    fresh.post("/emulator/reset")  # which clears faults and counts
    assert fresh.post("/emulator/faults", json={"match": RPC, "kind": "status", "code": 502}).status_code == 201
    assert await _report_a_turn(fresh) == TURN
    assert _routes(fresh) == {"patch": 3, "agent_api": 0}
    assert fresh.get("/emulator/faults").json()["faults"][0]["fired"] == 1  # the CLI's ping, refused


@pytest.mark.parametrize("code", [404, 405])
async def test_a_status_route_coder_no_longer_serves_is_logged_once_and_clearly(fresh, monkeypatch, caplog, code):
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not Path(p, "coder").exists()))
    assert fresh.post("/emulator/faults", json={"match": PATCH, "kind": "status", "code": code}).status_code == 201
    token = fresh.get(f"/emulator/agents/{WORKSPACE}/token").json()["token"]
    reporter = Reporter(str(fresh.base_url), token, SLUG)
    reporter.start()
    try:
        assert await reporter.route() == "patch"
        for task in ("One", "Two"):  # two turns, as the runner reports them
            reporter.working(task)
            reporter.finished(f"{task} done", False, None)
        deadline = time.monotonic() + WAIT_S
        while fresh.get("/emulator/faults").json()["faults"][0]["fired"] < 6:  # working, complete, idle twice
            assert time.monotonic() < deadline, "the reporter stopped reporting"
            await asyncio.sleep(0.05)
    finally:
        await reporter.stop()
    logged = [r.getMessage() for r in caplog.records if r.name == "fleet_mcp.runner"]
    said = [line for line in logged if "no longer serves" in line]
    assert len(said) == 1 and f"HTTP {code}" in said[0] and "UpdateAppStatus" in said[0]
    assert not [line for line in logged if "could not report app status" in line]  # one line, not one per status
    assert token not in str(logged)


async def test_the_emulated_cli_names_its_tool_and_arguments_as_coders(fresh, tmp_path):
    coder_bin = tmp_path / "bin" / "coder"
    install_coder(coder_bin.parent)
    token = fresh.get(f"/emulator/agents/{WORKSPACE}/token").json()["token"]
    env = {"PATH": os.environ["PATH"], "CODER_AGENT_URL": str(fresh.base_url), "CODER_AGENT_TOKEN": token,
           "CODER_MCP_APP_STATUS_SLUG": SLUG}
    async with Client(StdioTransport(str(coder_bin), ["exp", "mcp", "server"], env=env)) as cli:
        (tool,) = await cli.list_tools()
        assert tool.name == "coder_report_task" and tool.description.startswith("Report progress on your work.")
        assert sorted(tool.input_schema["required"]) == ["link", "state", "summary"]
        assert tool.input_schema["properties"]["state"]["enum"] == ["working", "complete", "idle", "failure"]
        with pytest.raises(ToolError, match="summary must be less than 160 characters"):
            await cli.call_tool("coder_report_task", {"summary": "x" * 161, "link": "", "state": "working"})
        answer = await cli.call_tool("coder_report_task", {"summary": "Tests pass", "link": "", "state": "idle"})
        assert answer.data == {"message": "Thanks for reporting!"}
        assert await _statuses(fresh, 1) == [("idle", "Tests pass", "")]


def _cpu_s(pid: int) -> float:
    """CPU seconds of process `pid` and the children it has reaped (/proc/PID/stat utime..cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (those ended too, until it reaps them)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(pid):
            found.append(int(entry))
    return found


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def test_the_cli_a_runner_workspace_forks_reports_the_same_for_a_fraction_of_a_process_start(fresh, tmp_path,
                                                                                                     monkeypatch):
    """The emulator's runner workspaces fork their `coder` from one process that imported it (emulator/forks.py):
    the same reports by the same route, at a few tenths of a second of CPU where a process of its own cost
    2-3 s (importing fastmcp), half of what a runner workspace cost."""
    bin_dir = tmp_path / "bin"
    forks = spawn_forks(bin_dir)
    try:
        assert first_line(forks, WAIT_S) == "ready"
        install_coder(bin_dir, forked=True)
        monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
        before = _cpu_s(forks.pid) + _children_cpu_s()
        already = set(_children(os.getpid()))  # the fork server, and the tests' own (tests/processes.Forks)
        assert await _report_a_turn(fresh) == TURN
        deadline = time.monotonic() + WAIT_S
        # The CLI (here a copy the fork server made) ends with its client; once reaped, its CPU counts.
        while _children(forks.pid) or set(_children(os.getpid())) - already:
            assert time.monotonic() < deadline, "the forked CLI outlived its client"
            await asyncio.sleep(0.05)
        spent = _cpu_s(forks.pid) + _children_cpu_s() - before
        assert _routes(fresh) == {"patch": 0, "agent_api": 4}  # the CLI's ping, then the three statuses
        assert spent < 1.0, f"{spent:.2f} s of CPU for one CLI"
    finally:
        os.killpg(forks.pid, signal.SIGKILL)
        forks.wait(WAIT_S)
        for pipe in (forks.stdin, forks.stdout):
            if pipe is not None:
                pipe.close()


def test_the_runner_reaches_coders_cli_with_no_fastmcp(tmp_path):
    """The runner talks to Coder's CLI with the MCP SDK's own client, which claude-agent-sdk imports anyway:
    fastmcp's client on top cost each runner workspace about a second of CPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "coder").write_text("#!/bin/sh\nexit 1\n")  # a CLI that cannot report: started, then given up
    (bin_dir / "coder").chmod(0o755)
    code = ("import asyncio, contextlib, sys\n"
            "from fleet_mcp.runner import app, main, report, session\n"
            "from fleet_mcp.runner.coder_cli import CoderCLI\n"
            "async def run():\n"
            "    async with contextlib.AsyncExitStack() as stack:\n"
            "        return await CoderCLI.open(stack, 'fleet', 'http://127.0.0.1:9', 'token')\n"
            "print(asyncio.run(run()), sorted({m.split('.')[0] for m in sys.modules} & {'fastmcp', 'mcp'}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S, check=False,
                          env={**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])})
    assert done.stdout.strip() == "None ['mcp']", done.stdout + done.stderr[-2000:]
