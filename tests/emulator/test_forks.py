"""The fork server (fleet_mcp/emulator/forks.py) and its relay (relay.py): a relay is the process its caller
asked for, whose work a copy of the fork server does: the same stdio, arguments, environment, directory, umask
and file limits; the signals a process is sent reach the copy; the relay ends as the copy ended; a relay killed
outright takes its copy with it; with no fork server, the relay runs the program itself.

The emulator runs Coder's CLI in runner workspaces this way, and the tests their `fleet-mcp` processes.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.processes import RELAY, WAIT_S, Lines, clean_env, pipes, stop

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "tests.emulator.forked_program"


@contextmanager
def fork_server(directory: Path) -> Iterator[subprocess.Popen[str]]:
    """A fork server of the test program listening in `directory`; ended (its stdin closed) after."""
    proc = subprocess.Popen([sys.executable, "-m", "fleet_mcp.emulator.forks", str(directory), PROGRAM],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=clean_env(),
                            process_group=0)  # this session: a copy can join its relay's group
    stdin, stdout = pipes(proc)
    try:
        assert Lines(stdout).line() == "ready\n"
        yield proc
    finally:
        stdin.close()  # it ends when its stdin does, and takes its socket away
        assert proc.wait(WAIT_S) == 0
        stdout.close()
    assert not (directory / "forks.sock").exists()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("forks")
    with fork_server(directory):
        yield directory


def relay(directory: Path, *args: str, stdin: int, stdout: int, stderr: int | None = None, cwd: Path | None = None,
          env: dict[str, str] | None = None, preexec_fn: Callable[[], None] | None = None,
          process_group: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-I", "-S", str(RELAY), str(directory), PROGRAM, *args], text=True,
                            stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, env=env, preexec_fn=preexec_fn,
                            process_group=process_group)


def gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # the fork server reaps its copies: until then, a zombie
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_copy_has_what_the_relay_was_handed_and_its_exit_code_comes_back(server, tmp_path):
    def lowered() -> None:
        os.umask(0o027)
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 300))
        default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a process

    proc = relay(server, "report", "7", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 cwd=tmp_path, env=clean_env(PROBE="from the caller"), preexec_fn=lowered)
    out, err = proc.communicate("the caller's stdin", timeout=WAIT_S)
    assert proc.returncode == 7
    seen = json.loads(out)
    assert seen["argv"] == [PROGRAM, "report", "7"] and seen["cwd"] == str(tmp_path)
    assert seen["env"] == "from the caller" and seen["umask"] == 0o027 and seen["nofile"] == [200, 300]
    assert seen["stdin"] == "the caller's stdin" and err == "to stderr\n"
    assert seen["pid"] != proc.pid and seen["preloaded"] == ["yes"]  # a copy: preloaded once, in the server
    # the signals its caller ignored, as its caller left them (not as the fork server's were)
    assert seen["signals"] == {"SIGINT": "default", "SIGTERM": "default", "SIGHUP": "ignored"}
    assert seen["group"] not in (proc.pid, os.getpgrp())  # its relay leads no group: it stays in the server's


def test_a_copy_joins_the_group_its_relay_leads_and_dies_with_it(server):
    """As the emulator starts a runner: its relay leads a process group, and a kill of that group takes the
    copy and whatever the copy started (the runner's Claude Code), as it would a process of its own."""
    proc = relay(server, "report", "0", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, process_group=0)
    out, _ = proc.communicate(timeout=WAIT_S)
    assert json.loads(out)["group"] == proc.pid
    proc = relay(server, "wait", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, process_group=0)
    assert proc.stdout is not None
    copy = json.loads(Lines(proc.stdout).line())["pid"]
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(WAIT_S) == -signal.SIGKILL and gone(copy)
    proc.stdout.close()


def default_signals() -> None:
    """In a child about to run a relay: the signals it passes on at their defaults, whatever this test's own
    runner ignores (a shell's background job ignores SIGINT, `nohup` SIGHUP)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def test_the_signals_a_process_is_sent_reach_the_copy_and_the_relay_ends_as_it_did(server):
    for what, sig, code in (("trap", signal.SIGTERM, 3), ("wait", signal.SIGTERM, -signal.SIGTERM),
                            ("wait", signal.SIGINT, -signal.SIGINT), ("wait", signal.SIGHUP, -signal.SIGHUP)):
        proc = relay(server, what, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     preexec_fn=default_signals)
        assert proc.stdout is not None and proc.stderr is not None
        copy = json.loads(Lines(proc.stdout).line())["pid"]
        assert stop(proc, sig) == code, (what, sig)
        assert gone(copy)
        if sig == signal.SIGINT:  # Python's own: KeyboardInterrupt's trace, then death by SIGINT
            assert "KeyboardInterrupt" in proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()


def test_a_signal_its_caller_ignored_still_reaches_a_copy_that_handles_it(server):
    """A relay started ignoring SIGINT (as a shell's background job is) still passes it on: its copy starts
    ignoring it (the report test), but a program that handles SIGINT itself (as the fleet's server does) hears
    it, as the process itself would. Started with SIGINT at its default, the same."""
    def ignoring() -> None:
        default_signals()
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    for started in (ignoring, default_signals):
        proc = relay(server, "echo", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, preexec_fn=started)
        assert proc.stdout is not None
        said = Lines(proc.stdout)
        json.loads(said.line())
        proc.send_signal(signal.SIGINT)
        assert stop(proc, signal.SIGTERM) == 4
        assert "".join(said.rest()) == "SIGINT\nSIGTERM\n", started
        proc.stdout.close()


def test_a_relay_killed_outright_takes_its_copy_with_it(server):
    proc = relay(server, "wait", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    copy = json.loads(Lines(proc.stdout).line())["pid"]
    assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert gone(copy)
    proc.stdout.close()


def test_a_fork_server_that_ends_takes_the_copies_still_running_with_it(tmp_path):
    with fork_server(tmp_path):
        proc = relay(tmp_path, "wait", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        copy = json.loads(Lines(proc.stdout).line())["pid"]
    assert proc.wait(WAIT_S) == -signal.SIGKILL and gone(copy)
    proc.stdout.close()


def test_a_copy_that_fails_shows_its_trace_and_exits_1(server):
    proc = relay(server, "fail", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 1 and "RuntimeError: a failure, as any process shows it" in err


def test_with_no_fork_server_the_relay_runs_the_program_itself(tmp_path):
    proc = relay(tmp_path, "report", "5", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=ROOT,
                 env=clean_env(PROBE="alone"))
    out, _ = proc.communicate(timeout=WAIT_S)
    seen = json.loads(out)
    assert proc.returncode == 5 and seen["pid"] == proc.pid and seen["env"] == "alone"
    assert seen["argv"][1:] == ["report", "5"] and seen["preloaded"] == []  # `python -m`: no preload
