"""`fleet-mcp emulator` as a real process on a real socket: starts, answers, stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest


def start(*args: str) -> tuple[subprocess.Popen, dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "fleet_mcp", "emulator", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    settings = {}
    for _ in range(2):
        line = proc.stdout.readline().strip()
        key, _, value = line.partition("=")
        settings[key] = value
    return proc, settings


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_emulator_serves_and_stops_cleanly(sig):
    proc, settings = start("--token", "t0ken-xyz")
    try:
        assert settings["CODER_SESSION_TOKEN"] == "t0ken-xyz"
        url = settings["CODER_URL"]
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, headers={"Coder-Session-Token": "t0ken-xyz"}, timeout=10) as client:
            assert client.get("/api/v2/buildinfo").status_code == 200
            me = client.get("/api/v2/users/me")
            assert me.status_code == 200 and me.json()["username"] == "demo"
            names = [w["name"] for w in client.get("/api/v2/workspaces", params={"q": "owner:me"}).json()["workspaces"]]
            assert sorted(names) == ["dev-box", "hand-made"]
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_real_time_workspace_is_up_within_seconds():
    proc, settings = start()
    try:
        with httpx.Client(base_url=settings["CODER_URL"],
                          headers={"Coder-Session-Token": settings["CODER_SESSION_TOKEN"]}, timeout=10) as client:
            t = client.get("/api/v2/organizations/coder/templates/fleet-demo").json()
            ws = client.post("/api/v2/users/me/workspaces", json={"name": "quick", "template_id": t["id"]}).json()
            status = None
            for _ in range(100):  # a real process on real time: poll, bounded at ~10 s
                status = client.get(f"/api/v2/workspaces/{ws['id']}").json()["latest_build"]["status"]
                if status == "running":
                    break
                time.sleep(0.1)
            assert status == "running"
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
    assert proc.returncode == 0
