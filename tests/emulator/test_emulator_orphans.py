"""Whatever the emulator starts dies with it, however it dies: runners, their Claude Codes and the scratch directory.

Real processes: `fleet-mcp --emulator --agent-runtime runner` (the seed's agent gets a runner and the real Claude
Code at once), killed with SIGKILL, which no handler sees.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.processes import clean_env, http_server
from tests.runners import needs_sdk

T = TypeVar("T")

pytestmark = [pytest.mark.system, needs_sdk]
UP_S = 180.0  # bounds on processes starting on a loaded machine; met in seconds when it is not
GONE_S = 60.0


def descendants(pid: int) -> dict[int, str]:
    """The live processes under `pid` (from /proc), with their command lines."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            names[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(entry))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = names.get(child, "")
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def until(check: Callable[[], T], within: float, what: str) -> T:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {within:.0f} s"
        time.sleep(0.5)
    return found


def test_a_killed_emulator_takes_its_runners_their_claude_codes_and_its_scratch_directory(tmp_path):
    scratch = tmp_path / "tmp"
    dead = subprocess.Popen(["true"])  # its pid, once it is gone, owns the scratch directory of a dead emulator
    dead.wait()
    stale = scratch / f"fleet-emulator-{dead.pid}-abc123"
    (stale / "some-workspace" / "work").mkdir(parents=True)
    kept = (scratch / f"fleet-emulator-{os.getpid()}-live", scratch / "fleet-emulator-unknown")
    for root in kept:
        root.mkdir()
    with http_server(tmp_path, "--agent-runtime", "runner", env=clean_env(TMPDIR=str(scratch)), real=True) as server:
        def agents_up() -> dict[int, str]:
            under = descendants(server.proc.pid)
            return under if any("_bundled/claude" in c for c in under.values()) else {}

        started = until(agents_up, UP_S, "the seed agent's runner and Claude Code up")
        assert any("fleet_mcp.runner.program --workdir" in c for c in started.values()), started
        assert not stale.exists()  # swept as this emulator started: its owner is gone
        assert all(root.exists() for root in kept)  # a live process's, and one whose owner cannot be told
        for root in kept:
            root.rmdir()
        assert [p.name.split("-")[2] for p in scratch.iterdir()] == [str(server.proc.pid)]  # named by its owner
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(GONE_S)
        until(lambda: not any(alive(pid) for pid in started), GONE_S, "every process the emulator started gone")
        until(lambda: not list(scratch.iterdir()), GONE_S, "the scratch directory gone, Claude Code's own too")
