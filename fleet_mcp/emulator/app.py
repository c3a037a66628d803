"""The emulator as an ASGI app, and a way to serve it on a socket."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount

from .agentapi.claude import ClaudeCode
from .agentapi.server import AgentAPI
from .clock import Clock
from .coder.backend import Backend
from .coder.lifecycle import Timings
from .coder.proxy import AppHosts, AppProxy
from .coder.routes import coder_routes
from .control import Control, agent_routes, control_routes
from .faults import FaultMiddleware
from .runners.anthropic import messages_app
from .runners.runtime import Runners

__all__ = ["REAL_TIME", "Emulator", "bind", "running", "serve"]

# On real time a workspace is up within a few seconds.
REAL_TIME = Timings(job_queue=0.2, start_build=1.0, stop_build=0.5, delete_build=0.5, cancel=0.3,
                    agent_connect=0.3, agent_startup=0.5, app_healthy=0.3)


AGENT_RUNTIMES = ("agentapi", "runner")


class Emulator:
    """A local Coder: the backend, its control operations and the ASGI app serving both.

    `agent_runtime` is what runs behind fleet agents' apps: "agentapi" (default: a
    scripted Claude Code behind AgentAPI, app `ccw`, all on the clock) or "runner"
    (a real `fleet-mcp runner` process per started workspace, app `fleet`; needs
    the emulator served on a socket, see `running()`). Runners talk to
    `anthropic_base_url`, by default the emulator's own scripted Messages API at
    `/emulator/anthropic`.
    """

    def __init__(self, *, token: str = "demo-token", virtual: bool = True, timings: Timings | None = None,
                 seed: str = "demo", agent_runtime: str = "agentapi", anthropic_base_url: str | None = None) -> None:
        if agent_runtime not in AGENT_RUNTIMES:
            raise ValueError(f"agent_runtime must be one of {', '.join(AGENT_RUNTIMES)}, not {agent_runtime!r}")
        self.agent_runtime = agent_runtime
        self.url = ""  # where it is served, once it is ("" until then; runners report to it)
        self.backend = Backend(clock=Clock(virtual=virtual), timings=timings or Timings())
        self.claude = ClaudeCode(self.backend)  # before the seed, so seeded agents run too
        self.runners = Runners(self.backend, anthropic_base_url) if agent_runtime == "runner" else None
        self.proxy = AppProxy(self.backend, self.claude, AgentAPI(self.claude), self.runners)
        self.control = Control(self.backend, token, agent_runtime)
        self.control.reset(seed)
        table: list[BaseRoute] = [*control_routes(self.control, self.proxy),
                                  *agent_routes(self.backend, self.claude, self.runners),
                                  Mount("/emulator/anthropic", app=messages_app()),  # the runners' model
                                  *self.proxy.routes(), *coder_routes(self.backend)]
        routes = Starlette(routes=table, lifespan=self._lifespan)
        faulty = FaultMiddleware(routes, self.control.faults)  # skips /emulator/ itself
        self.app = AppHosts(faulty, self.proxy)  # subdomain app URLs, as their path twins

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # On real time, timers also fire between requests (live event streams need them).
        tasks = [] if self.backend.clock.virtual else [asyncio.create_task(self._tick())]
        if self.runners:
            self.runners.url = self.url
            supervisor = asyncio.create_task(self.runners.run())
            await asyncio.sleep(0)  # a missing URL fails the start-up here
            if supervisor.done():
                supervisor.result()
            tasks.append(supervisor)
        try:
            yield
        finally:
            await self.proxy.aclose()
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _tick(self) -> None:
        while True:
            self.backend.settle()
            await asyncio.sleep(0.05)

    @property
    def token(self) -> str:
        return self.control.token

    def advance(self, seconds: float) -> None:
        self.backend.clock.advance(seconds)

    def close(self) -> None:
        """Stop every process the emulator started (its lifespan does this too) and remove their directories."""
        if self.runners:
            self.runners.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one), so the URL is known before serving."""
    # IPPROTO_TCP spelled out: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP,
    # and without it a keep-alive answer waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve(app, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve an ASGI app on a bound socket until SIGINT/SIGTERM, then return normally."""
    await _server(app, log_level=log_level).serve(sockets=[sock])


@contextlib.asynccontextmanager
async def running(emulator: Emulator, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve `emulator` on a free port of `host` for the block, yielding its base URL; then stop uvicorn."""
    sock = bind(host, 0)
    url = f"http://{f'[{host}]' if ':' in host else host}:{sock.getsockname()[1]}"
    if isinstance(emulator, Emulator):
        emulator.url = url
    server = _server(emulator.app, log_level="warning", log_config=None)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.005)
        if task.done():
            task.result()
            raise RuntimeError("the emulator stopped before it started serving")
        yield url
    finally:
        server.should_exit = True
        await task
        sock.close()


def in_background(emulator: Emulator, host: str = "127.0.0.1", wait_s: float = 30.0) -> Callable[[], None]:
    """Serve `emulator` on a free port from a thread of its own (its URL is set on return); the function
    returned stops it, and with it every process it started."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def serve_until_stopped() -> None:
        stop.append(asyncio.Event())
        async with running(emulator, host):
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve_until_stopped(),),
                              name="fleet-emulator", daemon=True)
    thread.start()
    if not ready.wait(wait_s):
        raise RuntimeError("the emulator did not start serving")

    def close() -> None:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(wait_s)

    return close


def _server(app, **config):
    import uvicorn

    class Server(uvicorn.Server):
        # uvicorn re-raises the signal after its graceful shutdown, which would
        # end the process with -SIGTERM; a clean stop should exit 0.
        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        async def shutdown(self, sockets=None) -> None:
            # Stalled requests would hold shutdown for the whole graceful timeout: end them first.
            getattr(app, "release", lambda: None)()
            await super().shutdown(sockets=sockets)

    return Server(uvicorn.Config(app, lifespan="on", timeout_graceful_shutdown=5, **config))
