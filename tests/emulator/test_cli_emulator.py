"""`fleet-mcp emulator` as a real process on a real socket: starts, answers, stops cleanly."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from processes import emulator_process, stop


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
