"""Helpers for tests that run the real Claude Code through `fleet-mcp runner`: an ASGI app served on a
loopback socket from a background thread (the scripted Messages API, or the Coder emulator), the
runner as a real process talking to it, and bounded waits on the runner's `/state`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from fleet_mcp.emulator.app import running
from fleet_mcp.emulator.runners.anthropic import Reply, messages_app
from fleet_mcp.emulator.runners.runtime import first_line
from fleet_mcp.runner.store import Saved
from tests.conformance import Conformance
from tests.processes import clean_env, runner_command
from tests.support import APP_HOST, TOKEN, CheckedTransport, Tools, fleet_settings, subdomain_apps_only

if TYPE_CHECKING:
    from mcp.client.extension import ClientExtension
    from starlette.types import ASGIApp

    from fleet_mcp.emulator import Emulator

__all__ = ["HAS_SDK", "RUNNER_KEY", "WAIT_S", "RunningRunner", "ScriptedAPI", "SharedFleet", "all_met", "disk",
           "fleet_server", "named", "needs_sdk", "runner_api", "runner_emulator", "runner_env", "runner_fleet",
           "runner_process", "scripted_api", "served", "shared_runner_fleet"]

HAS_SDK = importlib.util.find_spec("claude_agent_sdk") is not None
needs_sdk = pytest.mark.skipif(not HAS_SDK, reason="claude-agent-sdk is not installed (pip install -e '.[runner]')")
WAIT_S = 120.0  # an upper bound on processes (as processes.WAIT_S): it must hold on a loaded machine
RUNNER_KEY = "test-runner-key"  # runner_process gives the runner its digest, as the template does


def runner_emulator(anthropic_base_url: str | None = None) -> Emulator:
    """A real-time emulator whose fleet templates run agents on the runner, on the `fleet` seed (the demo's
    users and templates, not its workspaces: `hand-made` and alice's `alice-agent` would each run a runner and
    the real Claude Code on its spec, seconds of CPU for every emulator, and no story uses them)."""
    from fleet_mcp.emulator import REAL_TIME, Emulator

    return Emulator(token=TOKEN, virtual=False, timings=REAL_TIME, agent_runtime="runner", seed="fleet",
                    anthropic_base_url=anthropic_base_url)


@asynccontextmanager
async def runner_fleet(conformance: Conformance, app_mode: str = "path", anthropic_base_url: str | None = None,
                       extensions: Sequence[ClientExtension] | None = None,
                       **settings: Any) -> AsyncIterator[tuple[Tools, httpx.AsyncClient]]:
    """The fleet's tools over a real-time emulator whose fleet templates run agents on the runner (talking to
    `anthropic_base_url`, else the emulator's own scripted model); with `app_mode="subdomain"` the emulator
    refuses path apps, and the fleet reaches the runners' app hosts (which no DNS knows) through
    FLEET_MCP_CONNECT_TO."""
    emulator = runner_emulator(anthropic_base_url)
    if app_mode == "subdomain":
        subdomain_apps_only(emulator)
    async with running(emulator) as url, httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": TOKEN},
                                                           timeout=30) as coder:
        if app_mode == "subdomain":
            settings["connect_to"] = f"*.{APP_HOST}=127.0.0.1:{httpx.URL(url).port}"
        async with fleet_server(conformance, url, extensions, **settings) as tools:
            yield tools, coder


@dataclass
class SharedFleet:
    """One runner fleet for a file's stories (`shared_runner_fleet`), each story on agents of its own."""

    tools: Tools
    coder: httpx.AsyncClient
    model: ScriptedAPI | None  # the scripted Messages API the runners talk to, when not the emulator's own

    async def forget_agents(self) -> None:
        """Delete every workspace (a story's agents, after it), so runners left idle cost nothing; faults and
        request counts are cleared for the next story."""
        listed = (await self.coder.get("/api/v2/workspaces", params={"q": "owner:me"})).json()["workspaces"]
        for ws in listed:
            await self.coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "delete"})
        await self.coder.delete("/emulator/faults")
        await self.coder.delete("/emulator/requests")


def shared_runner_fleet(script: Callable[[dict[str, Any]], Reply] | None = None,
                        **settings: Any) -> Callable[[pytest.FixtureRequest], AsyncIterator[SharedFleet]]:
    """A module fixture: one `runner_fleet` (on a scripted Messages API of `script`'s when given) for a file's
    stories, which run on the module's event loop (`pytest.mark.asyncio(loop_scope="module")`). A runner fleet
    costs a few seconds of CPU to start; each story creates agents of its own names."""
    import pytest_asyncio

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def fleet(request: pytest.FixtureRequest) -> AsyncIterator[SharedFleet]:
        conformance = request.config.stash[Conformance.KEY]
        with contextlib.ExitStack() as stack:
            model = stack.enter_context(scripted_api(script)) if script else None
            async with runner_fleet(conformance, anthropic_base_url=model.url if model else None,
                                    **settings) as (tools, coder):
                yield SharedFleet(tools, coder, model)

    return fleet


def named(agents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The agent called `name` in a list (a shared fleet also lists the agents of earlier stories, going)."""
    return next(a for a in agents if a["name"] == name)


async def all_met(tools: Tools, names: list[str], **arguments: Any) -> dict[str, Any]:
    """wait_for_agents on `names`, which must all meet it (an error envelope or a timeout fails here)."""
    answer = await tools("wait_for_agents", agent_names=names, timeout_s=WAIT_S, **arguments)
    assert sorted(answer.get("met") or []) == sorted(names), answer
    return answer


@asynccontextmanager
async def fleet_server(conformance: Conformance, url: str, extensions: Sequence[ClientExtension] | None = None,
                       **settings: Any) -> AsyncIterator[Tools]:
    """The fleet's tools, served by a server of its own with these settings, on the Coder at `url` (another
    replica, or another server on the same Coder)."""
    from fastmcp import Client

    from fleet_mcp.server import build_server

    transport = CheckedTransport(httpx.AsyncHTTPTransport(), conformance)
    # rate_share=1: a story's back-to-back waits poll every 0.2 s, and on a slow machine a minute of them would
    # pass the default share of Coder's 512 requests/minute and the next wait be refused (`unavailable`).
    settings = {"rate_share": 1.0, **settings}
    server = build_server(fleet_settings(coder_url=url, poll_interval_s=0.1, wait_poll_interval_s=0.2,
                                         cancel_wait_s=20, delete_wait_s=30, **settings), transport=transport)
    async with Client(server, extensions=extensions) as client:
        yield Tools(client)


async def disk(coder: httpx.AsyncClient, name: str) -> Path:
    """The agent's workspace directory, where Claude Code works."""
    return Path((await coder.get(f"/emulator/agents/{name}/runner")).json()["directory"]) / "work"


@contextmanager
def served(app: ASGIApp) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port from its own thread and event loop; yields its base URL."""
    loop = asyncio.new_event_loop()
    url: list[str] = []
    up, stop = threading.Event(), asyncio.Event()

    async def serve() -> None:
        async with running(SimpleNamespace(app=app)) as base:  # type: ignore[arg-type]
            url.append(base)
            up.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        assert up.wait(WAIT_S), "the app did not start serving"
        yield url[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(WAIT_S)
        loop.close()


@dataclass
class ScriptedAPI:
    """The scripted Messages API on a socket, and what it has been asked."""

    url: str
    client: httpx.Client  # one for every call: a new httpx client costs ~50 ms of CPU (its TLS context)

    def requests(self) -> list[dict[str, Any]]:
        asked: list[dict[str, Any]] = self.client.get(f"{self.url}/requests").json()["requests"]
        return asked

    def model_requests(self) -> list[dict[str, Any]]:
        """The conversation's own calls (those offering tools), oldest first."""
        return [r["body"] for r in self.requests() if r["path"] == "/v1/messages" and (r["body"] or {}).get("tools")]


@contextmanager
def scripted_api(script: Callable[[dict[str, Any]], Reply] | None = None) -> Iterator[ScriptedAPI]:
    """The scripted Messages API on a socket; `script` overrides its markers (see `messages_app`)."""
    with served(messages_app(script)) as url, httpx.Client(timeout=5) as client:
        yield ScriptedAPI(url, client)


@asynccontextmanager
async def runner_api(tmp_path: Path, saved: Saved | None = None,
                     door: bool = False) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the runner's own routes (`build_app`) in this process, its state file holding `saved`: what
    `fleet-mcp runner` answers, without Claude Code (the session, started by the lifespan, never runs). With
    `door`, behind the runner's door as `fleet-mcp runner` serves them, the client holding the fleet's key."""
    from fleet_mcp.runner.app import build_app
    from fleet_mcp.runner.door import Door, verifier_of
    from fleet_mcp.runner.report import Reporter
    from fleet_mcp.runner.session import Conversation
    from fleet_mcp.runner.settings import RunnerSettings
    from fleet_mcp.runner.store import Store

    settings = RunnerSettings(workdir=tmp_path, state_file=tmp_path / "state.json")
    store = Store(settings.state_path)
    if saved is not None:
        store.save(saved)
    app = build_app(Conversation(settings, store, Reporter(None, None, settings.app_slug)))
    if door:
        app = Door(app, verifier_of(RUNNER_KEY), settings.host_patterns)  # type: ignore[assignment]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:4300",
                                 headers={"X-Fleet-Runner-Key": RUNNER_KEY} if door else {}) as client:
        yield client


def runner_env(home: Path, messages_url: str, **extra: str) -> dict[str, str]:
    """A clean environment in which Claude Code talks only to `messages_url`, with a scratch HOME."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(("FLEET_RUNNER_", "ANTHROPIC_", "CLAUDE"))}
    return {**env, "HOME": str(home), "ANTHROPIC_BASE_URL": messages_url, "ANTHROPIC_API_KEY": "sk-test-offline",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "FLEET_RUNNER_KEY_SHA256": hashlib.sha256(RUNNER_KEY.encode()).hexdigest(), **extra}


@dataclass
class RunningRunner:
    """A `fleet-mcp runner` process and a client for its API."""

    url: str
    proc: subprocess.Popen[bytes]
    workdir: Path
    stderr: Path
    client: httpx.Client  # one for every call: waits poll /state, and a new httpx client costs ~50 ms of CPU
    key: str = RUNNER_KEY

    @property
    def door(self) -> dict[str, str]:
        """The header that opens the runner's door (what the fleet sends)."""
        return {"X-Fleet-Runner-Key": self.key}

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        kwargs["headers"] = {**self.door, **kwargs.get("headers", {})}
        return self.client.get(self.url + path, **kwargs)

    def post(self, path: str, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        kwargs["headers"] = {**self.door, **kwargs.get("headers", {})}
        return self.client.post(self.url + path, json={} if body is None else body, **kwargs)

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.get("/state").json()
        return state

    def results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = self.get("/results").json()["results"]
        return results

    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.get("/messages").json()["messages"]
        return messages

    def wait_for(self, ready: Callable[[dict[str, Any]], bool], timeout: float = WAIT_S,
                 what: str = "") -> dict[str, Any]:
        """Polls /state until `ready(state)`; fails with the last state and the log after `timeout`."""
        deadline, pause = time.monotonic() + timeout, 0.02
        while True:
            state = self.state()
            if ready(state):
                return state
            assert self.proc.poll() is None, f"the runner exited:\n{self.logs()}"
            assert time.monotonic() < deadline, f"waited {timeout} s for {what or 'state'}; last {state}\n{self.logs()}"
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)  # a poll costs both processes ~2 ms of CPU; a turn takes seconds

    def wait_turns(self, turns: int, timeout: float = WAIT_S) -> dict[str, Any]:
        """Waits until `turns` turns have finished and the runner is idle."""
        return self.wait_for(lambda s: s["turns"] >= turns and s["state"] == "idle", timeout, f"{turns} turn(s)")

    def settle(self) -> dict[str, Any]:
        """Interrupts a running turn (denying a pending prompt) and waits until idle with nothing queued."""
        if self.state()["state"] in ("working", "needs_input"):
            self.post("/interrupt")
        return self.wait_for(lambda s: s["state"] == "idle" and s["queued"] == 0, what="idle, nothing queued")

    def logs(self) -> str:
        return self.stderr.read_text(errors="replace")


@contextmanager
def runner_process(tmp_path: Path, messages_url: str, *args: str, workdir: Path | None = None,
                   home: Path | None = None, real: bool = False, **env: str) -> Iterator[RunningRunner]:
    """`fleet-mcp runner --port 0` in `workdir` (default tmp_path/work) against `messages_url`, answering
    /health before this yields; `env` adds variables (FLEET_RUNNER_SPEC=...). Stopped with SIGTERM after.
    `real`: a process of its own, never a copy (tests/processes.Forks), where a test reads it by its pid."""
    workdir = workdir or tmp_path / "work"
    home = home or tmp_path / "home"
    workdir.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    err = tmp_path / f"runner-{time.monotonic_ns()}.log"
    with open(err, "w") as errfile:
        proc = subprocess.Popen([*runner_command(real), "--port", "0", "--workdir", str(workdir), *args],
                                stdout=subprocess.PIPE, stderr=errfile, stdin=subprocess.DEVNULL,
                                env=runner_env(home, messages_url, **env), cwd=tmp_path)
    try:
        line = first_line(proc, WAIT_S)
        assert line.startswith("FLEET_RUNNER_URL="), f"no URL line (got {line!r}):\n{err.read_text()}"
        with httpx.Client(timeout=15) as client:
            running = RunningRunner(line.split("=", 1)[1], proc, workdir, err, client)
            running.wait_for(lambda s: True, what="the API")
            yield running
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(WAIT_S)
        if proc.stdout:
            proc.stdout.close()
