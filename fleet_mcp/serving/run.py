"""Running the server until SIGTERM or SIGINT, then stopping gracefully, over stdio or HTTP.

On the first signal the server takes no new work, lets the tool calls in
flight finish and answer (for up to `GRACE_S`), then leaves its lifespan, which
closes the Coder client (and the audit log); `fleet-mcp` then exits 0. A second
signal stops waiting for the calls in flight.

- stdio: FastMCP's runner serves pipes of ours (`stdio.StdioGate`). After the
  signal, or once the client closes stdin, no new line is handed to the server;
  once every request handed on has been answered (or the grace is over: once
  stdin closed, the calls' own deadlines) the server sees the end of its input
  and leaves as usual.
- HTTP: uvicorn, with its own signal handling made to drain first: the socket
  stops listening at once (new connections are refused, so a balancer sends
  them to another replica), GET streams (which only wait for server messages)
  end, requests on connections already open get 503, and uvicorn waits up to
  `GRACE_S` for the requests in flight before the lifespan ends.
- Both: waits in flight (`wait_for_agents`) answer `unavailable` at once with
  a hint to wait again, rather than holding the stop or being cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

from fastmcp import FastMCP

from ..settings import Settings

__all__ = ["GRACE_S", "serve_http", "serve_stdio"]

GRACE_S = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
log = logging.getLogger("fleet_mcp")


# --- stdio ---------------------------------------------------------------------------

@contextlib.contextmanager
def _on_signals(loop: asyncio.AbstractEventLoop, handler: Callable[[int], None]) -> Iterator[None]:
    for sig in SIGNALS:
        loop.add_signal_handler(sig, handler, sig)
    try:
        yield
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
        _ignore_late_signals()


def _ignore_late_signals() -> None:
    # Past this point the server is done: a late signal must not turn exit code 0 into -15.
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


async def serve_stdio(server: FastMCP, grace: float = GRACE_S, log_level: str | None = None,
                      stopping: asyncio.Event | None = None, patient_grace: float | None = None) -> None:
    """Serve MCP on stdin/stdout (FastMCP's own runner) until stdin ends or a signal stops it, gracefully;
    `stopping` is set as the stop begins. Once stdin ends, the calls in flight get `patient_grace` (their
    longest deadline: `deadlines.longest_call`), a signal `grace`."""
    from .stdio import StdioGate

    loop = asyncio.get_running_loop()
    gate = StdioGate(loop, stopping)
    with _on_signals(loop, lambda sig: gate.stop(f"{signal.Signals(sig).name} received")), gate.installed():
        ender = asyncio.create_task(gate.end_input_when_drained(grace, patient_grace))
        try:
            await server.run_async(transport="stdio", show_banner=False, log_level=log_level)
        finally:
            ender.cancel()


# --- HTTP ----------------------------------------------------------------------------

async def serve_http(server: FastMCP, settings: Settings, host: str, sock: socket.socket,
                     grace: float = GRACE_S, fd_limit: int = 1024, stopping: asyncio.Event | None = None) -> None:
    """Serve streamable HTTP at /mcp on `sock` (bound to `host`) until a signal stops the server gracefully.

    Connections are guarded (`connections.ConnectionGuard`): idle and half-sent ones time out, at most
    `FLEET_MCP_HTTP_MAX_CONNECTIONS` (and `fd_limit` minus a headroom) are open, loop errors such as
    failed accepts are logged once per interval with a count. `stopping` is set as the stop begins.
    """
    import math

    import uvicorn
    from sse_starlette.sse import AppStatus

    from .connections import ConnectionGuard, Throttled, fit_connections, guarded_protocol
    from .front import mcp_url
    from .http import Drain, build_app

    drain = Drain()
    loop = asyncio.get_running_loop()
    throttled = Throttled()
    loop.set_exception_handler(throttled.asyncio_handler)
    cap, backlog = fit_connections(fd_limit, settings.http_max_connections)
    if cap < settings.http_max_connections:
        log.warning("FLEET_MCP_HTTP_MAX_CONNECTIONS=%d is above what the open-file limit (%d) allows: %d it is",
                    settings.http_max_connections, fd_limit, cap)
    guard = ConnectionGuard(cap, settings.http_idle_timeout_s, settings.http_read_timeout_s, throttled)
    # sse-starlette would end every SSE response on shutdown, tool results in flight included: only
    # the Drain ends streams here (GET ones), and only the Drain decides what is in flight.
    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]  # sse-starlette's own

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit:  # a second signal: stop waiting, but still leave the lifespan
                loop.call_soon_threadsafe(self.hurry)
                return
            loop.call_soon_threadsafe(log.info, "%s received: finishing the requests in flight, then stopping",
                                      signal.Signals(sig).name)
            super().handle_exit(sig, frame)
            # Refused connections first (a balancer then sends new requests elsewhere, as it may for a request
            # no replica received), then the drain and the waits cut short, whose callers ask again.
            loop.call_soon_threadsafe(self.stop_listening)
            loop.call_soon_threadsafe(drain.start)
            if stopping is not None:
                loop.call_soon_threadsafe(stopping.set)

        def stop_listening(self) -> None:
            for listener in getattr(self, "servers", []):
                listener.close()

        def hurry(self) -> None:
            log.warning("second signal: cancelling %d request(s) in flight", len(self.server_state.tasks))
            for task in list(self.server_state.tasks):
                task.cancel()
            for connection in list(self.server_state.connections):
                connection.transport.close()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own, minus raising the signal again once served: we exit 0 instead.
            original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)
                if self.should_exit:
                    _ignore_late_signals()

    config = uvicorn.Config(build_app(server, settings, host, drain), lifespan="on", http=guarded_protocol(guard),
                            backlog=backlog,
                            timeout_keep_alive=max(1, math.ceil(settings.http_idle_timeout_s)),
                            timeout_graceful_shutdown=round(grace), ws="none", server_header=False,
                            access_log=False,  # ours (http.Gate) leaves out query strings
                            log_config=None, log_level=settings.log_level.lower())  # uvicorn's too: stderr, our format
    log.info("MCP endpoint: %s (GET /healthz for load balancers)", mcp_url(host, sock.getsockname()[1]))
    await Server(config).serve(sockets=[sock])
