"""The runner runtime: real `fleet-mcp runner` processes (real Claude Code, scripted model) behind the
emulator's app proxy, started, stopped, resumed and cleaned up with their workspaces."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from fleet_mcp.emulator import REAL_TIME, Emulator
from fleet_mcp.emulator.app import running
from tests.support import TOKEN, client_for, create_workspace, template_named

T = TypeVar("T")

HAS_SDK = importlib.util.find_spec("claude_agent_sdk") is not None
needs_sdk = pytest.mark.skipif(not HAS_SDK, reason="claude-agent-sdk is not installed (pip install -e '.[runner]')")
WAIT_S = 90.0
RUNNER_PARAMS = ["fleet_mcp_model", "fleet_mcp_max_turns", "fleet_mcp_max_cost_usd"]
KEY = "emulator-test-key"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def gone(pid: int) -> bool:
    """No process is left in the runner's process group (the runner and its Claude Code)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def until(check: Callable[[], Awaitable[T]], what: str, timeout: float = WAIT_S) -> T:
    """Polls the async `check()` until it returns something truthy; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"waited {timeout} s for {what}; last {last!r}")


async def test_the_demo_seed_declares_the_runner_app_and_parameters(conformance):
    emulator = Emulator(token=TOKEN, agent_runtime="runner")
    async with client_for(emulator, conformance) as coder:
        for name in ("fleet-demo", "fleet-research"):
            version = (await template_named(coder, name))["active_version_id"]
            resources = (await coder.get(f"/api/v2/templateversions/{version}/resources")).json()
            assert [a["slug"] for a in resources[0]["agents"][0]["apps"]] == ["fleet"]
            params = {p["name"]: p for p in (await coder.get(
                f"/api/v2/templateversions/{version}/rich-parameters")).json()}
            assert all(params[p]["default_value"] == "" and not params[p]["required"] for p in RUNNER_PARAMS)
    default = Emulator(token=TOKEN)
    async with client_for(default, conformance) as coder:
        version = (await template_named(coder, "fleet-demo"))["active_version_id"]
        resources = (await coder.get(f"/api/v2/templateversions/{version}/resources")).json()
        assert [a["slug"] for a in resources[0]["agents"][0]["apps"]] == ["ccw"]
        names = {p["name"] for p in (await coder.get(f"/api/v2/templateversions/{version}/rich-parameters")).json()}
        assert not names & set(RUNNER_PARAMS)


async def test_the_fleet_seed_is_the_demo_seed_without_its_workspaces(conformance):
    """What the demo and the runner stories start from: no workspace of the demo seed runs a Claude Code."""
    emulator = Emulator(token=TOKEN, agent_runtime="runner", seed="fleet")
    async with client_for(emulator, conformance) as coder:
        templates = {t["name"] for t in (await coder.get("/api/v2/templates")).json()}
        assert templates == {"fleet-demo", "fleet-research", "docker"}
        assert (await coder.get("/api/v2/workspaces")).json()["count"] == 0
        assert (await coder.get("/api/v2/users/alice")).status_code == 200
        assert (await coder.post("/emulator/reset", json={"seed": "demo"})).status_code == 200
        assert (await coder.get("/api/v2/workspaces")).json()["count"] > 0
        assert (await coder.post("/emulator/reset", json={"seed": "fleet"})).status_code == 200
        assert (await coder.get("/api/v2/workspaces")).json()["count"] == 0


def test_an_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="agent_runtime"):
        Emulator(agent_runtime="tmux")


async def test_the_runner_runtime_needs_a_socket():
    emulator = Emulator(token=TOKEN, agent_runtime="runner", seed="empty")
    assert emulator.runners is not None
    with pytest.raises(RuntimeError, match="served on a socket"):  # no URL to give runners as CODER_AGENT_URL
        await emulator.runners.run()
    assert emulator.runners.procs == {}


@pytest.mark.system
@needs_sdk
async def test_real_runners_follow_their_workspaces(conformance):
    emulator = Emulator(token=TOKEN, virtual=False, timings=REAL_TIME, seed="empty", agent_runtime="runner")
    async with running(emulator) as url, httpx.AsyncClient(
            base_url=url, headers={"Coder-Session-Token": TOKEN}, timeout=30,
            event_hooks={"response": [conformance.hook]}) as coder:
        assert (await coder.post("/emulator/templates", json={"name": "fleet-runner"})).status_code == 201
        ws = (await create_workspace(coder, "agent-1", template="fleet-runner", params={
            "fleet_mcp_managed": "true", "fleet_mcp_role": "coder",
            "fleet_mcp_agent_spec": "Write the notes [[edit:notes.txt]]", "fleet_mcp_runner_key": KEY})).json()
        app = "/@demo/agent-1.main/apps/fleet"
        coder.headers["X-Fleet-Runner-Key"] = KEY  # the runner's door: as the fleet calls it

        async def finished_turn():
            r = await coder.get(f"{app}/state")
            return r.status_code == 200 and r.json()["turns"] >= 1 and r.json()["state"] == "idle" and r.json()

        first = await until(finished_turn, "the spec's turn behind the app proxy")
        refused = await coder.post(f"{app}/message", json={"content": "hi", "bogus": 1})  # the runner's own 400
        assert refused.status_code == 400 and refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"] == "bad_request"
        async with httpx.AsyncClient(base_url=url, timeout=10) as stranger:  # the proxy's checks come first
            assert (await stranger.get(f"{app}/state")).status_code == 303
        keyless = await coder.get(f"{app}/state", headers={"X-Fleet-Runner-Key": "guess"})  # then the runner's
        assert keyless.status_code == 401 and keyless.json()["error"] == "unauthorized"
        runner = (await coder.get("/emulator/agents/agent-1/runner")).json()
        disk = Path(runner["directory"])
        assert (disk / "work" / "notes.txt").is_file()  # Claude Code wrote it in the workspace's directory
        work = disk / "work"  # a git repository seeded with the small project: the edit is a real change
        assert git(work, "log", "--format=%s") == "Seed: a tiny calculator\n" and git(work, "branch", "--show-current") == "main\n"
        assert git(work, "status", "--porcelain") == "?? notes.txt\n"
        assert first["changes_summary"] == "1 file, +1 −0"
        shown = (await coder.get(f"/api/v2/workspaces/{ws['id']}")).json()
        fleet_app = shown["latest_build"]["resources"][0]["agents"][0]["apps"][0]
        assert fleet_app["health"] == "healthy"
        assert shown["latest_app_status"]["state"] == "idle"  # the runner's own reports reached Coder
        assert {s["state"] for s in fleet_app["statuses"]} >= {"working", "complete", "idle"}

        async def pinged():  # the runner started the workspace's `coder` CLI, which pinged its agent
            routes = (await coder.get("/emulator/requests")).json()["routes"]
            return routes.get("POST /api/v2/workspaceagents/me/rpc/{method}", 0) >= 1

        await until(pinged, "the runner to start Coder's CLI")

        await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
        await until(lambda: _status(coder, ws["id"], "stopped"), "the stop build")
        await until(lambda: _true(gone(runner["pid"])), "the runner to exit")
        assert (disk / "home" / ".fleet-runner" / "state.json").is_file()  # the disk stays

        await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})

        async def resumed():
            r = await coder.get(f"{app}/state")
            return r.status_code == 200 and r.json()

        again = await until(resumed, "the runner to come back")
        assert again["session_id"] == first["session_id"] and again["turns"] == first["turns"]  # resumed, no re-send
        restarted = (await coder.get("/emulator/agents/agent-1/runner")).json()
        assert restarted["pid"] != runner["pid"] and restarted["directory"] == runner["directory"]

        await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "delete"})
        await until(lambda: _true(not disk.exists()), "the workspace's directory to go")
        assert gone(restarted["pid"])

        second = await _runner_up(coder, "agent-2")
        await coder.post("/emulator/reset", json={"seed": "empty"})  # the deployment forgets agent-2
        await until(lambda: _true(gone(second["pid"]) and not Path(second["directory"]).exists()),
                    "a reset to stop the forgotten runner")
        assert (await coder.post("/emulator/templates", json={"name": "fleet-runner"})).status_code == 201
        last = await _runner_up(coder, "agent-3")
        root = Path(last["directory"]).parent
        # Deleted just as the emulator stops (the demo's last steps): a stop under way is not lost.
        last_ws = (await coder.get("/api/v2/users/me/workspace/agent-3")).json()
        await coder.post(f"/api/v2/workspaces/{last_ws['id']}/builds", json={"transition": "delete"})
        async def deleted() -> bool:
            return (await coder.get(f"/api/v2/workspaces/{last_ws['id']}")).status_code == 410

        await until(deleted, "the delete build")
    assert gone(last["pid"])  # the emulator stopped: every process it started is gone
    assert not root.exists()


async def _runner_up(coder: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """Create a spec-less fleet workspace and wait for its runner behind the app proxy; its runner info."""
    await create_workspace(coder, name, template="fleet-runner", params={"fleet_mcp_managed": "true"})

    async def healthy():
        return (await coder.get(f"/@demo/{name}/apps/fleet/health")).status_code == 200

    await until(healthy, f"the runner of {name}")
    body: dict[str, Any] = (await coder.get(f"/emulator/agents/{name}/runner")).json()
    return body


async def _status(coder: httpx.AsyncClient, ws_id: str, status: str) -> bool:
    reached: bool = (await coder.get(f"/api/v2/workspaces/{ws_id}")).json()["latest_build"]["status"] == status
    return reached


async def _true(value: bool) -> bool:
    return value
