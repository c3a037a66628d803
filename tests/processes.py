"""Real processes for tests and `bench/run.py` alike: a clean environment, free ports, servers that are
up before the caller goes on, the `fleet-mcp emulator` process, /proc readings, and bounded waits everywhere.

It imports neither fleet_mcp nor pytest: the benchmark measures the fleet only through its processes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, AnyStr

import httpx

SERVER = [sys.executable, "-m", "fleet_mcp"]
# Upper bounds on processes starting, answering and stopping: met in seconds on an idle machine, they must hold
# on a loaded 2-core one (a server's start-up took over 20 s at load 14); a real hang still fails, later.
WAIT_S = 120.0
RELAY = Path(__file__).resolve().parents[1] / "fleet_mcp" / "emulator" / "relay.py"


class Forks:
    """`fleet-mcp` and `fleet-mcp runner` processes as copies of one process that imported them
    (fleet_mcp/emulator/forks.py), started at first use: each then costs a relay's few milliseconds and a fork,
    where importing fastmcp, mcp and claude-agent-sdk cost 1.5-2 s of CPU. A copy is the process a test asked
    for (its stdio, arguments, environment, directory, file limits; signals passed on, exit code or signal
    passed back), except that its pid is not the one the caller holds: a test that reads a process by its pid
    starts it with `real=True` (`fleet_command`, `runner_command`, `http_server`...).
    """

    FLEET = "fleet_mcp.cli"  # `fleet-mcp ...`
    RUNNER = "fleet_mcp.runner.program"  # `fleet-mcp runner ...`: preloaded only with the runner extra

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: subprocess.Popen[str] | None = None
        self._directory = ""
        runner = importlib.util.find_spec("claude_agent_sdk") is not None
        self.programs = (self.FLEET, self.RUNNER) if runner else (self.FLEET,)

    def command(self, program: str = FLEET) -> list[str]:
        """The command that runs `program` (one of `programs`) as a copy: append its arguments."""
        with self._lock:
            if self._server is None or self._server.poll() is not None:
                self._start()
        return [sys.executable, "-I", "-S", str(RELAY), self._directory, program]

    def _start(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="fleet-forks-")
        self._server = subprocess.Popen([sys.executable, "-m", "fleet_mcp.emulator.forks", self._directory,
                                         *self.programs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=clean_env(), cwd=self._directory,
                                        start_new_session=True)
        if Lines(pipes(self._server)[1]).next() != "ready\n":
            raise RuntimeError(f"the fork server did not start: exit code {self._server.poll()}")

    def close(self) -> None:
        """End the fork server, and with it the copies still running (a test stops its own before)."""
        with self._lock:
            if self._server is not None:
                pipes(self._server)[0].close()
                self._server.wait(WAIT_S)
                pipes(self._server)[1].close()
                self._server = None
            shutil.rmtree(self._directory, ignore_errors=True)


FORKS: Forks | None = None  # set by the tests' conftest: the benchmark measures real processes


def fleet_command(real: bool = False) -> list[str]:
    """How a test runs `fleet-mcp`: a copy forked by FORKS when the tests set it (unless `real`), else the
    `fleet-mcp` console script beside this Python (as installed), else `python -m fleet_mcp`."""
    if FORKS is not None and not real:
        return FORKS.command()
    script = Path(sys.executable).with_name("fleet-mcp")
    return [str(script)] if script.exists() else SERVER


def runner_command(real: bool = False) -> list[str]:
    """How a test runs `fleet-mcp runner`: a copy forked by FORKS when the tests set it (unless `real`)."""
    if FORKS is not None and not real and Forks.RUNNER in FORKS.programs:
        return FORKS.command(Forks.RUNNER)
    return [*SERVER, "runner"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Coder, fleet or FastMCP settings, unbuffered, plus `extra`.

    PYTHONDONTWRITEBYTECODE is dropped too: servers start with bytecode caching, as an installed package does.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CODER_", "FLEET_MCP_", "FASTMCP_")) and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def free_port() -> int:
    """A loopback port nothing listens on (until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_serving(url: str, proc: subprocess.Popen[Any], logs: Path | None = None, timeout: float = WAIT_S) -> None:
    """Return once `url` gives any HTTP answer; raise if `proc` exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:  # one: a new httpx client costs ~50 ms of CPU (its TLS context)
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}: {logs.read_text() if logs else ''}")
            try:
                client.get(url)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer within {timeout:g} s") from None
                time.sleep(0.05)


def stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = WAIT_S) -> int:
    """Signal `proc` (if still running) and reap it, killing it when it outstays `timeout`; its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a process that refuses to start prints: exit code 2, nothing on stdout, one stderr line."""
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line: str = lines[0]
    return line


def pipes(proc: subprocess.Popen[AnyStr]) -> tuple[IO[AnyStr], IO[AnyStr]]:
    """The stdin and stdout of `proc`, which was started with both piped."""
    if proc.stdin is None or proc.stdout is None:
        raise ValueError(f"{proc.args!r} was started without stdin and stdout piped")
    return proc.stdin, proc.stdout


class Lines:
    """A subprocess pipe read by a thread, so every read can be bounded."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float = WAIT_S) -> str | None:
        """The next line, None at the end; queue.Empty after `timeout` seconds without one."""
        return self.lines.get(timeout=timeout)

    def line(self, timeout: float = WAIT_S) -> str:
        """The next line; RuntimeError if the stream has ended, queue.Empty after `timeout` seconds."""
        if (line := self.next(timeout)) is None:
            raise RuntimeError("the stream ended")
        return line

    def rest(self, timeout: float = WAIT_S) -> list[str]:
        out = []
        while (line := self.next(timeout)) is not None:
            out.append(line)
        return out

    def settings(self, count: int, timeout: float = WAIT_S) -> dict[str, str]:
        """The next `count` lines read as KEY=VALUE."""
        found: dict[str, str] = {}
        for _ in range(count):
            line = self.next(timeout)
            if line is None:
                raise RuntimeError(f"the process ended after printing {found}")
            key, _, value = line.strip().partition("=")
            found[key] = value
        return found


@dataclass
class Emulated:
    """A `fleet-mcp emulator` process: its CODER_URL and CODER_SESSION_TOKEN."""

    proc: subprocess.Popen[str]
    url: str
    token: str


@contextmanager
def emulator_process(*args: str, stderr: IO[str] | int = subprocess.DEVNULL, real: bool = False
                     ) -> Iterator[Emulated]:
    """`fleet-mcp emulator --port 0 *args` (real time; AgentAPI agents unless `args` say `--agent-runtime runner`),
    serving before this yields; stopped after. `real`: a process of its own, never a copy (see `Forks`)."""
    proc = subprocess.Popen([*fleet_command(real), "emulator", "--port", "0", "--agent-runtime", "agentapi", *args],
                            stdout=subprocess.PIPE,
                            stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=clean_env())
    try:
        assert proc.stdout is not None
        found = Lines(proc.stdout).settings(2)
        yield Emulated(proc, found["CODER_URL"], found["CODER_SESSION_TOKEN"])
    finally:
        stop(proc)


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:<port>/mcp
    port: int
    stderr: Path

    def logs(self) -> str:
        return self.stderr.read_text()


def with_file_limit(command: list[str], soft: int | None, hard: int | None = None) -> list[str]:
    """`command` run with its limits on open files lowered (the hard one stays unless given); prlimit execs it."""
    if soft is None:
        return command
    return ["prlimit", f"--nofile={soft}:{hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1]}", *command]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def http_server(tmp_path: Path, *args: str, env: dict[str, str] | None = None, host: str = "127.0.0.1",
                command: list[str] | None = None, file_limit: tuple[int, int | None] | None = None,
                port: int | None = None, real: bool = False) -> Iterator[Running]:
    """An HTTP MCP server on a free port, answering before this yields; stopped (SIGTERM) after.

    By default `fleet-mcp --emulator --transport http`; `command` replaces `fleet-mcp --emulator` (it must
    take `--transport http --host H --port P` too); `file_limit` lowers its open-file limits; `port` is a free
    one unless given; `real`: a process of its own, never a copy (see `Forks`: its pid is the server's).
    """
    port = port or free_port()
    err = tmp_path / f"stderr-{port}.log"
    with open(tmp_path / f"stdout-{port}.log", "w") as out, open(err, "w") as errfile:
        full = [*(command or [*fleet_command(real), "--emulator"]), "--transport", "http", "--host", host, "--port", str(port),
                *args]
        proc = subprocess.Popen(with_file_limit(full, *(file_limit or (None,))), stdout=out, stderr=errfile,
                                stdin=subprocess.DEVNULL, env=env or clean_env(), cwd=tmp_path)
    running = Running(proc, f"http://127.0.0.1:{port}/mcp", port, err)
    try:
        wait_serving(f"http://127.0.0.1:{port}/", proc, err)
        yield running
    finally:
        stop(proc)


def per_user_server(tmp_path: Path, coder_url: str, *args: str, port: int | None = None, real: bool = False,
                    **settings: str) -> AbstractContextManager[Running]:
    """`fleet-mcp --transport http` in per-user mode (FLEET_MCP_AUTH=coder) against `coder_url`, no server token,
    its audit log at tmp_path/audit-<port>.jsonl unless `settings` names one (FLEET_MCP_AUDIT_LOG)."""
    env = clean_env(CODER_URL=coder_url, FLEET_MCP_AUTH="coder", **settings)
    return http_server(tmp_path, *args, env=env, command=fleet_command(real), port=port)


NGINX_MAIN = """worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
    include {tmp}/site.conf;
}}
"""


def nginx_binary() -> str | None:
    """Debian's nginx, if installed (it lives in /usr/sbin, off a plain user's PATH)."""
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


@contextmanager
def nginx_process(tmp_path: Path, site: str, upstreams: list[int]) -> Iterator[str]:
    """nginx (in the foreground) serving `site` (an nginx.conf `server`/`upstream` snippet such as deploy/nginx.conf)
    with its upstreams 127.0.0.1:8001, :8002 ... replaced by `upstreams` and its listen port by a free one;
    yields its base URL once it answers, stopped after."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed")
    port = free_port()
    for n, upstream in enumerate(upstreams, start=1):
        site = site.replace(f"127.0.0.1:{8000 + n}", f"127.0.0.1:{upstream}")
    site = site.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(NGINX_MAIN.format(tmp=tmp_path))
    errors = tmp_path / "nginx-stderr.log"
    with open(errors, "w") as err:
        proc = subprocess.Popen([binary, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        wait_serving(f"http://127.0.0.1:{port}/", proc, errors)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, signal.SIGQUIT)  # nginx's graceful stop


def audit_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a server's audit log (FLEET_MCP_AUDIT_LOG), none if it has none."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def pid_with_port(port: int, pids: list[int]) -> int | None:
    """Which of `pids` holds the TCP socket whose local port is `port` (read from /proc), if one does."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in list(f)[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return pid
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (clock-tick resolution, 10 ms on Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    """A process's resident set size now (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def child_pids() -> set[int]:
    """PIDs of this process's children (from /proc)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.add(int(entry))
    return found


# --- stdio as a script drives it ---------------------------------------------------

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "script", "version": "0"}}


def modern_call(request_id: object, tool: str, arguments: dict[str, Any]) -> str:
    """One `tools/call` line of the sessionless 2026-07-28 era: no handshake needed."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments, "_meta": MODERN}})


def piped(*lines: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
          ) -> subprocess.CompletedProcess[str]:
    """`printf lines | fleet-mcp --emulator [args]`, bounded: what a script does."""
    return subprocess.run([*fleet_command(), "--emulator", *args], check=False, input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True, timeout=WAIT_S, env=env or clean_env())
