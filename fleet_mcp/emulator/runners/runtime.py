"""The runner runtime: a real `fleet-mcp runner` process behind every started `fleet` app.

A supervisor task (run in the emulator's lifespan) reconciles processes with
the workspaces: an agent whose `fleet` app came up gets a runner in the
workspace's scratch directory (its disk: `work/`, a git repository seeded with a
small project, and `home/` under a temporary directory the emulator owns); a stop build or a replaced agent stops it
(SIGTERM, a bounded wait, then SIGKILL to its process group); a start brings a
new one up in the same directory, which resumes from its state file; a delete
removes the directory. The app's health follows the runner's `/health`. The
runner is a process of its own (`fleet-mcp runner`), forked through a relay by
the fork server that imported it once: nothing here imports the rest of
`fleet_mcp`. Whatever the emulator starts dies with it
however it dies: a reaper process (reaper.py) holds the runners' process groups
and the scratch root, and takes both down once the emulator's pipe to it closes;
a root whose emulator died before that is swept when the next emulator starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.responses import Response

from ..coder.seed import ROLE_PROMPTS
from ..coder.state import Agent, Workspace
from .project import seed_repository

if TYPE_CHECKING:
    import httpx

    from ..coder.backend import Backend

__all__ = ["HOP_BY_HOP", "RUNNER_SLUG", "RunnerForward", "Runners", "first_line", "install_coder", "spawn_forks",
           "sweep"]

log = logging.getLogger("fleet_mcp.emulator")

RUNNER_SLUG = "fleet"
ROOT_PREFIX = "fleet-emulator-"  # then the emulator's pid: a root whose emulator is gone is swept
CLI = "fleet_mcp.emulator.runners.coder_cli"  # the emulated `coder`, a module with preload() and main(argv)
RUNNER = "fleet_mcp.runner.program"  # `fleet-mcp runner`, the same way
RELAY = Path(__file__).parent.parent / "relay.py"
BIN = "bin"  # beside the workspaces' directories: what every workspace has on its PATH (Coder's CLI)
START_WAIT_S = 30.0
STOP_WAIT_S = 10.0
POLL_S = 1.0
# Variables of the emulator's own environment a runner must not inherit: it gets its own.
PRIVATE = ("FLEET_RUNNER_", "FLEET_MCP_", "ANTHROPIC_", "CLAUDE", "CODER_")
# What a reverse proxy does not pass on (Go's httputil.ReverseProxy; the length is the body's own). Coder's app
# proxy passes every other header on, credentials included: only Coder's own cookies are taken out before.
HOP_BY_HOP = {"content-length", "connection", "proxy-connection", "keep-alive", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}


@dataclass
class RunnerProcess:
    agent_id: str
    proc: subprocess.Popen
    log: Path
    url: str = ""


class Runners:
    """Every workspace's runner process; `url` (the emulator's own) must be set before `run()`."""

    def __init__(self, backend: Backend, anthropic_base_url: str | None = None) -> None:
        self.backend = backend
        self.anthropic_base_url = anthropic_base_url
        self.url: str | None = None
        self.root: Path | None = None
        self.procs: dict[str, RunnerProcess] = {}  # workspace id -> its runner
        self.ready: set[str] = set()  # agents whose apps came up: they run a runner
        self.exited: set[str] = set()  # agents whose runner ended on its own: not restarted (as a coder_script)
        self._wake: asyncio.Event | None = None
        self._client: httpx.AsyncClient | None = None
        self._reaper: subprocess.Popen | None = None
        self._forks: subprocess.Popen | None = None  # the runners' and `coder` CLI's fork server (emulator/forks.py)
        self._forks_up: asyncio.Task[str] | None = None
        backend.lifecycle.listeners.append(self._on_lifecycle)

    # --- what the proxy asks ----------------------------------------------------

    def url_of(self, ws: Workspace) -> str:
        """The runner's base URL when one listens for this workspace, else ''."""
        found = self.procs.get(ws.id)
        return found.url if found and found.proc.poll() is None else ""

    def directory(self, ws: Workspace) -> Path | None:
        """The workspace's scratch directory (its disk), once it has one."""
        return self.root / ws.id if self.root and (self.root / ws.id).exists() else None

    def forward(self, base: str, path: str) -> RunnerForward:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))
        return RunnerForward(self._client, base, path)

    # --- supervision --------------------------------------------------------------

    def _on_lifecycle(self, event: str, ws: Workspace) -> None:
        agent = ws.latest_build.agents[0] if ws.latest_build.agents else None
        if event == "app_ready" and agent:
            for app in agent.apps:
                if app.slug == RUNNER_SLUG:
                    app.health = "initializing"  # until the runner answers /health
                    self.ready.add(agent.id)
        if self._wake:
            self._wake.set()

    async def run(self) -> None:
        """Reconcile processes with workspaces until cancelled; then stop every process."""
        if not self.url:
            raise RuntimeError("agent_runtime='runner' needs the emulator served on a socket (its URL is the "
                               "runners' CODER_AGENT_URL): use app.running() or `fleet-mcp emulator`")
        await asyncio.to_thread(sweep, Path(tempfile.gettempdir()))
        self.root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-"))
        self._reaper = _spawn_reaper(self.root)
        install_coder(self.root / BIN, forked=True)
        self._wake = asyncio.Event()
        try:
            while True:
                try:
                    await self.reconcile()
                except OSError as exc:  # a full disk or a missing interpreter must not end supervision
                    log.warning("runner supervision: %s", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                self._wake.clear()
        finally:
            await self.aclose()

    async def reconcile(self) -> None:
        self.backend.settle()
        for ws_id in [w for w in self.procs if w not in self.backend.workspaces]:  # forgotten by a reset
            await self._retire(ws_id)
        if self.root:
            for disk in [d for d in self.root.iterdir() if d.name not in (*self.backend.workspaces, BIN)]:
                await asyncio.to_thread(shutil.rmtree, disk, True)
        for ws in list(self.backend.workspaces.values()):
            wanted = self._wanted(ws)
            have = self.procs.get(ws.id)
            if have and have.proc.poll() is not None:
                self.exited.add(have.agent_id)
                self._set_health(ws, have.agent_id, "unhealthy")
            if have and (wanted is None or wanted.id != have.agent_id or have.proc.poll() is not None):
                await self._retire(ws.id)
            if wanted and ws.id not in self.procs and wanted.id not in self.exited:
                await self._start(ws, wanted)
            if ws.deleted and self.root and (self.root / ws.id).exists():
                await asyncio.to_thread(shutil.rmtree, self.root / ws.id, True)
        await self._check_health()

    def _wanted(self, ws: Workspace) -> Agent | None:
        build = ws.latest_build
        if ws.deleted or build.transition != "start" or build.job.status != "succeeded" or not build.agents:
            return None
        agent = build.agents[0]
        return agent if agent.status == "connected" and agent.id in self.ready else None

    async def _start(self, ws: Workspace, agent: Agent) -> None:
        assert self.root is not None
        if self._forks is None:
            # Runners, and the CLI a workspace has (`coder exp mcp server` reports), forked from one process that
            # imported both, where a process of its own cost ~1.5 s (the runner) and ~2 s (the CLI) of CPU;
            # started with the first runner, since many emulators never start one.
            self._forks = spawn_forks(self.root / BIN)
            self._tell(f"+{self._forks.pid}")
            self._forks_up = asyncio.create_task(asyncio.to_thread(first_line, self._forks, START_WAIT_S))
        if self._forks_up is not None:  # listening before a runner starts (else each starts as a process)
            await asyncio.shield(self._forks_up)
        disk = self.root / ws.id
        (disk / "home").mkdir(parents=True, exist_ok=True)
        (disk / "tmp").mkdir(exist_ok=True)
        await asyncio.to_thread(seed_repository, disk / "work")  # the project the agent works on
        log = disk / "runner.log"
        # Spawned here, not in a thread: a cancel (the emulator stopping) between the spawn and this
        # bookkeeping would leave a runner no one stops, in a process group of its own.
        proc = _spawn(disk, log, self._env(ws, agent, disk))
        self._tell(f"+{proc.pid}")  # its process group: the runner's relay leads it, the runner joins it
        running = RunnerProcess(agent.id, proc, log)
        self.procs[ws.id] = running
        line = await asyncio.to_thread(first_line, proc, START_WAIT_S)
        if line.startswith("FLEET_RUNNER_URL="):
            running.url = line.split("=", 1)[1]
        # A daemon thread: were a runner ever left running, its open pipe must not hold this process at exit.
        threading.Thread(target=_drain, args=(proc,), name=f"drain-{ws.id[:8]}", daemon=True).start()

    def _env(self, ws: Workspace, agent: Agent, disk: Path) -> dict[str, str]:
        params = dict(ws.latest_build.parameters)
        owner = self.backend.users[ws.owner_id].username
        env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE)}
        chosen = {
            "FLEET_RUNNER_SPEC": params.get("fleet_mcp_agent_spec", ""),
            "FLEET_RUNNER_SYSTEM_PROMPT": ROLE_PROMPTS.get(params.get("fleet_mcp_role", ""), ""),
            "FLEET_RUNNER_MODEL": params.get("fleet_mcp_model", ""),
            "FLEET_RUNNER_MAX_TURNS": params.get("fleet_mcp_max_turns", ""),
            "FLEET_RUNNER_MAX_COST_USD": params.get("fleet_mcp_max_cost_usd", ""),
            "FLEET_RUNNER_RESULT_SCHEMA": params.get("fleet_mcp_result_schema", ""),
            "FLEET_RUNNER_PORT": "0",
            # As the template does: only the key's digest, and the hosts Coder's app proxy forwards with.
            "FLEET_RUNNER_KEY_SHA256": _verifier(params.get("fleet_mcp_runner_key", "")),
            "FLEET_RUNNER_ALLOWED_HOSTS": ",".join([urlsplit(self.url or "").hostname or "",
                                                    f"{RUNNER_SLUG}--{agent.name}--{ws.name}--{owner}.*",
                                                    f"{RUNNER_SLUG}--{ws.name}--{owner}.*"]),
            "CODER_AGENT_URL": self.url or "",
            "CODER_AGENT_TOKEN": agent.auth_token,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url or f"{self.url}/emulator/anthropic",
            "ANTHROPIC_API_KEY": "emulator",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HOME": str(disk / "home"),
            "TMPDIR": str(disk / "tmp"),  # as a workspace has its own /tmp: Claude Code's sockets go with the disk
            "PATH": os.pathsep.join([str(disk.parent / BIN), env.get("PATH", os.defpath)]),
            # As the template does: on the home volume, outside the project's git tree.
            "FLEET_RUNNER_STATE_FILE": str(disk / "home" / ".fleet-runner" / "state.json"),
        }
        return {**env, **{k: v for k, v in chosen.items() if v}}

    @staticmethod
    def _set_health(ws: Workspace | None, agent_id: str, health: str) -> bool:
        """Set the agent's `fleet` app health; False when that agent or app is gone."""
        agent = next((a for a in ws.latest_build.agents if a.id == agent_id), None) if ws else None
        app = next((a for a in agent.apps if a.slug == RUNNER_SLUG), None) if agent else None
        if app:
            app.health = health
        return app is not None

    async def _check_health(self) -> None:
        for ws_id, running in list(self.procs.items()):
            healthy = False
            if running.url and running.proc.poll() is None:
                with contextlib.suppress(Exception):
                    r = await self.forward(running.url, "/health").fetch("GET", timeout=2.0)
                    healthy = r.status_code == 200
            self._set_health(self.backend.workspaces.get(ws_id), running.agent_id,
                             "healthy" if healthy else "unhealthy" if running.url else "initializing")

    async def _retire(self, ws_id: str) -> None:
        """Stop a workspace's runner, then forget it. Forgotten only once stopped: a cancel (the emulator
        stopping) can drop a stop still queued for a thread, and `aclose` must then find the runner."""
        await asyncio.to_thread(self._stop, self.procs[ws_id])
        self._tell(f"-{self.procs.pop(ws_id).proc.pid}")

    @staticmethod
    def _stop(running: RunnerProcess) -> None:
        """SIGTERM, a bounded wait, then SIGKILL to the runner's whole process group (Claude Code too)."""
        proc = running.proc
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_WAIT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the runner left behind in its group
        if proc.stdout:
            proc.stdout.close()

    async def aclose(self) -> None:
        """Stop every runner (concurrently), close the proxy's client and remove the scratch directories."""
        procs, self.procs = list(self.procs.values()), {}
        await asyncio.gather(*(asyncio.to_thread(self._stop, p) for p in procs))
        for running in procs:
            self._tell(f"-{running.proc.pid}")
        self._end_forks()
        if self._forks_up is not None:  # its ready line read (or its end), before its pipe closes
            with contextlib.suppress(Exception):
                await self._forks_up
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self.close()

    def close(self) -> None:
        """Synchronous last resort: stop what still runs and remove the scratch root."""
        procs, self.procs = list(self.procs.values()), {}
        for running in procs:
            self._stop(running)
            self._tell(f"-{running.proc.pid}")
        self._end_forks()
        forks, self._forks = self._forks, None
        if forks is not None:
            self._tell(f"-{forks.pid}")
            for pipe in (forks.stdin, forks.stdout):
                if pipe:
                    pipe.close()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.stdin is not None:
            with contextlib.suppress(OSError):
                reaper.stdin.close()  # its cue: nothing is left to take down
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(STOP_WAIT_S)

    def _end_forks(self) -> None:
        """Kill the fork server with the copies in its process group (the CLIs; each runner is in its own)."""
        if self._forks is not None and self._forks.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._forks.pid, signal.SIGKILL)
            self._forks.wait(STOP_WAIT_S)

    def _tell(self, word: str) -> None:
        """One line to the reaper (a pipe write this short is atomic); a reaper gone changes nothing here."""
        if self._reaper is not None and self._reaper.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self._reaper.stdin.write(f"{word}\n".encode())
                self._reaper.stdin.flush()


class RunnerForward(Response):
    """Hands an app-proxy request to the runner over plain HTTP; status, body and content type come back."""

    def __init__(self, client: httpx.AsyncClient, base: str, path: str) -> None:
        super().__init__()
        self.client, self.base, self.path = client, base, path

    async def fetch(self, method: str, query: bytes = b"", headers: list | None = None, body: bytes = b"",
                    timeout: float | None = None) -> httpx.Response:
        url = self.base + self.path + (f"?{query.decode('latin-1')}" if query else "")
        if timeout is None:
            return await self.client.request(method, url, headers=headers or [], content=body)
        return await self.client.request(method, url, headers=headers or [], content=body, timeout=timeout)

    async def __call__(self, scope, receive, send) -> None:
        from ..coder.proxy import bad_gateway, read_body

        body = await read_body(receive)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in HOP_BY_HOP]
        try:
            r = await self.fetch(scope["method"], scope.get("query_string", b""), headers, body)
        except Exception:  # noqa: BLE001 - any failure to reach the runner is Coder's 502
            answer: Response = bad_gateway(self.base)
        else:
            answer = Response(r.content, r.status_code, media_type=r.headers.get("content-type"))
        for k, v in self.raw_headers:
            if k != b"content-length":
                answer.raw_headers.append((k, v))
        await answer(scope, receive, send)


def _verifier(value: str) -> str:
    """As the template does: the part after "." (a key derived from the fleet's secret), else the key's SHA-256."""
    if not value:
        return ""
    return value.split(".")[1] if "." in value else hashlib.sha256(value.encode()).hexdigest()


def install_coder(bin_dir: Path, forked: bool = False) -> None:
    """Write the `coder` executable a runner finds on its PATH (the emulated CLI: coder_cli.py); `forked`: a
    relay (emulator/relay.py) to the fork server listening in `bin_dir`, which runs it as a process of its own
    when no fork server answers."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "coder"
    run = (f"'{sys.executable}' -I -S '{RELAY}' '{bin_dir}' {CLI}" if forked else
           f"'{sys.executable}' -m {CLI}")
    script.write_text(f"#!/bin/sh\nexec {run} \"$@\"\n")
    script.chmod(0o755)


def _spawn(disk: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """`fleet-mcp runner` in the workspace's `work/`, leading a process group of its own: a relay (emulator/
    relay.py) whose runner the fork server in the workspaces' `bin/` forks into that group (a process of its own
    when no fork server answers)."""
    with open(log, "ab") as errors:
        return subprocess.Popen([sys.executable, "-I", "-S", str(RELAY), str(disk.parent / BIN), RUNNER,
                                 "--workdir", str(disk / "work")],
                                cwd=disk / "work", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=errors, process_group=0)


def spawn_forks(bin_dir: Path) -> subprocess.Popen:
    """The fork server of the workspaces' `coder` CLI and runners (emulator/forks.py), leading a process group
    of its own in this session (where the runners' groups are, which their copies join); it ends when its
    stdin does."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "fleet_mcp.emulator.forks", str(bin_dir), CLI, RUNNER],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            process_group=0)


def _spawn_reaper(root: Path) -> subprocess.Popen:
    """The reaper (reaper.py, by path: no package imports) in a session of its own, so a signal to the
    emulator's process group leaves it to do its work; it ends when its stdin does."""
    return subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).with_name("reaper.py")), str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def sweep(tmp: Path) -> None:
    """Remove the scratch roots (`fleet-emulator-<pid>-*`) of this user's emulators whose process is gone."""
    for root in tmp.glob(f"{ROOT_PREFIX}*"):
        pid = root.name[len(ROOT_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or root.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(root, ignore_errors=True)
        except OSError:  # alive but another user's (PermissionError), or the root went meanwhile
            continue


def first_line(proc: subprocess.Popen, timeout: float) -> str:
    """The process's first stdout line, or '' when it says nothing within `timeout` seconds."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline().decode(errors="replace").strip()


def _drain(proc: subprocess.Popen) -> None:
    """Read and drop whatever else the runner prints, so a full pipe never blocks it."""
    with contextlib.suppress(ValueError, OSError):
        while proc.stdout and proc.stdout.read(65536):
            pass
