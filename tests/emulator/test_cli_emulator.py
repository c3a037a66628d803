"""`fleet-mcp emulator` as a real process on a real socket: starts, answers, stops cleanly."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.processes import emulator_process, fleet_command, stop

pytestmark = pytest.mark.system


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_emulator_serves_and_stops_cleanly(sig, tmp_path):
    with open(tmp_path / "stderr", "w+") as err, emulator_process("--token", "t0ken-xyz", stderr=err) as emulated:
        assert emulated.token == "t0ken-xyz"
        url = emulated.url
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, headers={"Coder-Session-Token": "t0ken-xyz"}, timeout=10) as client:
            assert client.get("/api/v2/buildinfo").status_code == 200
            me = client.get("/api/v2/users/me")
            assert me.status_code == 200 and me.json()["username"] == "demo"
            names = [w["name"] for w in client.get("/api/v2/workspaces", params={"q": "owner:me"}).json()["workspaces"]]
            assert sorted(names) == ["dev-box", "hand-made"]
        code = stop(emulated.proc, sig, timeout=15)
        err.seek(0)
        logs = err.read()
    assert code == 0, logs
    assert "Traceback" not in logs


def test_real_time_workspace_is_up_within_seconds():
    with emulator_process() as emulated:
        with httpx.Client(base_url=emulated.url, headers={"Coder-Session-Token": emulated.token},
                          timeout=10) as client:
            t = client.get("/api/v2/organizations/coder/templates/fleet-demo").json()
            ws = client.post("/api/v2/users/me/workspaces", json={"name": "quick", "template_id": t["id"]}).json()
            status = None
            for _ in range(100):  # a real process on real time: poll, bounded at ~10 s
                status = client.get(f"/api/v2/workspaces/{ws['id']}").json()["latest_build"]["status"]
                if status == "running":
                    break
                time.sleep(0.1)
            assert status == "running"
        assert stop(emulated.proc, timeout=15) == 0


def test_the_empty_seed_prints_a_token_that_works():
    with emulator_process("--seed", "empty") as emulated:
        with httpx.Client(base_url=emulated.url, headers={"Coder-Session-Token": emulated.token},
                          timeout=10) as client:
            me = client.get("/api/v2/users/me")
            assert me.status_code == 200 and me.json()["username"] == "demo"
            assert client.get("/api/v2/templates").json() == []
            assert client.get("/api/v2/workspaces").json()["count"] == 0
        assert stop(emulated.proc, timeout=15) == 0


@pytest.mark.skipif(importlib.util.find_spec("claude_agent_sdk") is None,
                    reason="claude-agent-sdk is not installed (pip install -e '.[runner]')")
def test_runner_runtime_processes_end_with_the_emulator(tmp_path):
    pid = None
    with open(tmp_path / "stderr", "w+") as err, \
            emulator_process("--seed", "empty", "--agent-runtime", "runner", stderr=err) as emulated:
        with httpx.Client(base_url=emulated.url, headers={"Coder-Session-Token": emulated.token},
                          timeout=10) as client:
            assert client.post("/emulator/templates", json={"name": "fleet-runner"}).status_code == 201
            t = client.get("/api/v2/organizations/coder/templates/fleet-runner").json()
            client.post("/api/v2/users/me/workspaces", json={"name": "agent-1", "template_id": t["id"]})
            deadline = time.monotonic() + 60  # a real runner process: bounded wait
            while time.monotonic() < deadline:
                if client.get("/@demo/agent-1/apps/fleet/health").status_code == 200:
                    pid = client.get("/emulator/agents/agent-1/runner").json()["pid"]
                    break
                time.sleep(0.2)
            assert pid, "the runner never answered /health behind the app proxy"
        code = stop(emulated.proc, signal.SIGTERM, timeout=30)
        err.seek(0)
        assert code == 0, err.read()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the runner and its Claude Code are gone with the emulator


@pytest.mark.parametrize("flags", [(), ("--agent-runtime", "agentapi")])
def test_the_runtime_is_the_runner_when_its_extra_is_installed(flags):
    """`fleet-mcp emulator` gives the real Claude Code (the runner) when claude-agent-sdk is there, else AgentAPI;
    `--agent-runtime` says otherwise. Seen in the app a new fleet template declares (no workspace, no runner)."""
    runner = importlib.util.find_spec("claude_agent_sdk") is not None and not flags
    command = [*fleet_command(), "emulator", "--port", "0", "--seed", "empty", *flags]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            text=True)
    assert proc.stdout is not None
    try:
        url = proc.stdout.readline().strip().removeprefix("CODER_URL=")
        token = proc.stdout.readline().strip().removeprefix("CODER_SESSION_TOKEN=")
        with httpx.Client(base_url=url, headers={"Coder-Session-Token": token}, timeout=10) as client:
            assert client.post("/emulator/templates", json={"name": "probe"}).status_code == 201
            version = client.get("/api/v2/organizations/coder/templates/probe").json()["active_version_id"]
            resources = client.get(f"/api/v2/templateversions/{version}/resources").json()
    finally:
        stop(proc)
    apps = {app["slug"] for resource in resources for agent in resource.get("agents") or [] for app in agent["apps"]}
    assert apps == ({"fleet"} if runner else {"ccw"}), apps


@pytest.mark.skipif(importlib.util.find_spec("claude_agent_sdk") is not None, reason="claude-agent-sdk is installed")
def test_runner_runtime_without_the_sdk_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "-m", "fleet_mcp", "emulator", "--port", "0", "--agent-runtime", "runner"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "claude-agent-sdk" in done.stderr


def test_coders_app_flags_serve_subdomain_apps_and_refuse_path_apps():
    flags = ("--wildcard-access-url", "*.apps.example.test", "--disable-path-apps")
    with emulator_process(*flags) as emulated, httpx.Client(
            base_url=emulated.url, headers={"Coder-Session-Token": emulated.token}, timeout=10) as client:
        port = httpx.URL(emulated.url).port
        # Coder's appurl.SubdomainAppHost: the access URL's port joins a wildcard that names none.
        assert client.get("/api/v2/applications/host").json() == {"host": f"*.apps.example.test:{port}"}
        refused = client.get("/@demo/hand-made/apps/ccw/status")
        assert refused.status_code == 403 and "Path-based applications are disabled" in refused.text
        by_host = client.get("/status", headers={"Host": f"ccw--hand-made--demo.apps.example.test:{port}"})
        assert by_host.status_code == 200 and by_host.json()["status"] in ("stable", "running")


def test_a_taken_port_is_one_line_and_exit_2(tmp_path):
    import socket

    from tests.processes import WAIT_S, clean_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*fleet_command(), "emulator", "--port", str(port)], env=clean_env(), cwd=tmp_path,
                              capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # no CODER_URL for an emulator that is not serving
    assert done.stderr.strip().splitlines() == [
        f"fleet-mcp emulator: cannot listen on 127.0.0.1:{port}: port {port} is already in use: stop the other "
        f"server (`ss -ltnp 'sport = :{port}'` shows it) or pick another --port"]
