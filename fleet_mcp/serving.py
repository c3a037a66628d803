"""Running the server until SIGTERM or SIGINT, then stopping gracefully, over stdio or HTTP.

On the first signal the server takes no new work, lets the tool calls in
flight finish and answer (for up to `GRACE_S`), then leaves its lifespan, which
closes the Coder client (and the audit log); `fleet-mcp` then exits 0. A second
signal stops waiting for the calls in flight.

- stdio: stdin is read by a thread of ours, so the server can stop reading when
  told to. After the signal no new line is handed to the server; once every
  request read has been answered (or the grace is over) the server sees end of
  input, the same way out as when the client closes stdin.
- HTTP: uvicorn, with its own signal handling made to drain first: GET streams
  (which only wait for server messages) end, new requests get 503, and uvicorn
  waits up to `GRACE_S` for the requests in flight before the lifespan ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, Self

from fastmcp import FastMCP

from .settings import Settings

__all__ = ["GRACE_S", "serve_http", "serve_stdio"]

GRACE_S = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
log = logging.getLogger("fleet_mcp")


# --- stdio ---------------------------------------------------------------------------

def _request_key(request_id: Any) -> str:
    return json.dumps(request_id)


class _Stdin:
    """stdin as the async line iterator `stdio_server(stdin=...)` reads, which can be told to end.

    It also keeps the ids of the requests handed on and not yet answered, so a
    graceful stop ends the input only once they all are.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pending: set[str] = set()
        self.changed = asyncio.Event()
        self.stopping = False
        self.hurry = False
        self.deadline = 0.0
        # A daemon thread: a read blocked on stdin never holds up the exit.
        threading.Thread(target=self._pump, name="fleet-mcp-stdin", daemon=True).start()

    def _pump(self) -> None:
        # Raw reads of a private duplicate of fd 0: no lock of sys.stdin's buffer is held while
        # blocked, so a read still pending at exit cannot stall the interpreter's shutdown.
        try:
            fd = os.dup(sys.stdin.fileno())
        except (OSError, ValueError):
            fd = None
        pending = b""
        while fd is not None:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._put(line + b"\n")
        if pending:
            self._put(pending)
        self._put(None)

    def _put(self, line: bytes | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            self.loop.call_soon_threadsafe(self.lines.put_nowait, line)

    def stop(self, grace: float) -> None:
        if self.stopping:
            self.hurry = True
        else:
            self.stopping = True
            self.deadline = self.loop.time() + grace
        self.changed.set()

    def answered(self, request_id: Any) -> None:
        self.pending.discard(_request_key(request_id))
        self.changed.set()

    def _track(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict) or not isinstance(item.get("method"), str):
                continue
            if "id" in item:
                self.pending.add(_request_key(item["id"]))
            elif item["method"] == "notifications/cancelled":  # a cancelled request is never answered
                params = item.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self.pending.discard(_request_key(params["requestId"]))

    def __aiter__(self) -> _Stdin:
        return self

    async def __anext__(self) -> str:
        while not self.stopping:
            self.changed.clear()
            getter = asyncio.ensure_future(self.lines.get())
            waiter = asyncio.ensure_future(self.changed.wait())
            try:
                await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                line = getter.result()
                if line is None:  # the client closed stdin
                    raise StopAsyncIteration
                if self.stopping:  # read after the signal: not handed on
                    break
                self._track(line)
                return line.decode("utf-8", errors="replace")
        await self._drain()
        raise StopAsyncIteration

    async def _drain(self) -> None:
        if self.pending:
            log.info("shutting down: waiting for %d request(s) in flight (up to %.0f s)",
                     len(self.pending), max(0.0, self.deadline - self.loop.time()))
        while self.pending and not self.hurry:
            self.changed.clear()
            left = self.deadline - self.loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        if self.pending:
            log.warning("shutting down: %d request(s) still running are cancelled", len(self.pending))


class _Answers:
    """The server's write stream, telling `_Stdin` of each answer once the stdout writer has it."""

    def __init__(self, inner: Any, stdin: _Stdin) -> None:
        self._inner = inner
        self._stdin = stdin

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        message = getattr(item, "message", None)
        if getattr(message, "id", None) is not None and not hasattr(message, "method"):
            self._stdin.answered(message.id)  # a response or an error, not a request of ours

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@contextlib.contextmanager
def _on_signals(loop: asyncio.AbstractEventLoop, handler) -> Iterator[None]:
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


async def serve_stdio(server: FastMCP, grace: float = GRACE_S) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin or a signal stops the server gracefully.

    Mirrors FastMCP's `run_stdio_async` (its lifespan, then the SDK's stdio transport) with our stdin.
    """
    from fastmcp.server.context import reset_transport, set_transport
    from mcp.server.stdio import stdio_server

    loop = asyncio.get_running_loop()
    stdin = _Stdin(loop)

    def on_signal(sig: int) -> None:
        log.info("%s received: finishing the requests in flight, then stopping", signal.Signals(sig).name)
        stdin.stop(grace)

    token = set_transport("stdio")
    try:
        with _on_signals(loop, on_signal):
            # As FastMCP's run_stdio_async does: its lifespan, then the SDK's stdio transport (our stdin).
            async with server._lifespan_manager(), stdio_server(stdin=stdin) as (read_stream, write_stream):
                log.info("serving MCP over stdio")
                low = server._mcp_server
                await low.run(read_stream, _Answers(write_stream, stdin), low.create_initialization_options())
    finally:
        reset_transport(token)


# --- HTTP ----------------------------------------------------------------------------

async def serve_http(server: FastMCP, settings: Settings, host: str, port: int, grace: float = GRACE_S) -> None:
    """Serve streamable HTTP at http://host:port/mcp until a signal stops the server gracefully."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    from .http import Drain, build_app

    drain = Drain()
    loop = asyncio.get_running_loop()
    # sse-starlette would end every SSE response on shutdown, tool results in flight included: only
    # the Drain ends streams here (GET ones), and only the Drain decides what is in flight.
    AppStatus.disable_automatic_graceful_drain()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit:  # a second signal: stop waiting, but still leave the lifespan
                loop.call_soon_threadsafe(self.hurry)
                return
            loop.call_soon_threadsafe(log.info, "%s received: finishing the requests in flight, then stopping",
                                      signal.Signals(sig).name)
            super().handle_exit(sig, frame)
            loop.call_soon_threadsafe(drain.start)

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

    config = uvicorn.Config(build_app(server, settings, host, drain), host=host, port=port, lifespan="on",
                            timeout_graceful_shutdown=grace, ws="none", server_header=False,
                            log_config=None, log_level="info")  # uvicorn's logs too go to stderr, our format
    await Server(config).serve()
