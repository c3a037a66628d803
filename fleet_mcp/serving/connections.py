"""HTTP connections that cannot take the server down: timeouts, a cap, a raised descriptor limit, quiet logs.

- A connection waiting on its client — no request started within
  `FLEET_MCP_HTTP_IDLE_TIMEOUT_S`, or a request started but not fully sent
  within `FLEET_MCP_HTTP_READ_TIMEOUT_S` — is closed.
- At most `FLEET_MCP_HTTP_MAX_CONNECTIONS` are open (kept below the descriptor
  limit). A new connection over the cap closes the connection that has waited
  on its client the longest; when every open connection is busy with a request
  it gets `503` and is closed. So a flood of idle connections cannot lock a
  client that sends a request out.
- `raise_fd_limit` lifts the soft RLIMIT_NOFILE to the hard limit at start-up.
- `Throttled` logs a repeated event at most once per interval, with a count.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADROOM", "ConnectionGuard", "Throttled", "fit_connections", "guarded_protocol", "raise_fd_limit"]

log = logging.getLogger("fleet_mcp")

HEADROOM = 128  # descriptors kept for everything but client connections: Coder, logs, a burst of accepts
_REFUSAL_BODY = b'{"error":"unavailable","message":"Too many open connections; try again.","details":{}}'
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
           b"retry-after: 1\r\ncontent-length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n" + _REFUSAL_BODY)


def raise_fd_limit() -> int:
    """Lift the soft limit on open files to the hard one (where allowed); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def fit_connections(fd_limit: int, wanted: int) -> tuple[int, int]:
    """(connection cap, accept backlog) that fit under `fd_limit` descriptors.

    The event loop accepts up to `backlog` connections in one go before any is
    admitted or refused, so the cap plus that burst must stay below the limit.
    """
    headroom = min(HEADROOM, fd_limit // 2)
    cap = max(1, min(wanted, fd_limit - headroom))
    return cap, max(8, min(2048, headroom // 2))


class Throttled:
    """Logs an event the first time, then at most once per `interval_s` with how many happened meanwhile."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def note(self, kind: str, text: str) -> None:
        self._count[kind] = self._count.get(kind, 0) + 1
        now = self.clock()
        if now - self._last.get(kind, -self.interval_s) >= self.interval_s:
            count, self._count[kind] = self._count[kind], 0
            log.warning("%s (%d since the last such line; logged at most every %.0f s)", text, count,
                        self.interval_s)
            self._last[kind] = now

    def asyncio_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An event-loop exception handler: one throttled line per kind of error, no traceback."""
        exc = context.get("exception")
        message = str(context.get("message", "event loop error"))
        kind = f"{message}:{type(exc).__name__}"
        self.note(kind, f"{message}: {exc}" if exc is not None else message)


class ConnectionGuard:
    """The open connections of one server, and which of them wait on their client, oldest first."""

    def __init__(self, max_connections: int, idle_timeout_s: float, read_timeout_s: float,
                 throttled: Throttled | None = None) -> None:
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self.throttled = throttled or Throttled()
        self.open: set[Any] = set()
        self.waiting: OrderedDict[Any, asyncio.TimerHandle] = OrderedDict()
        self.reading: set[Any] = set()
        self.quiet: set[Any] = set()

    def admit(self, connection: Any) -> bool:
        """Make room for a new connection (closing the longest-waiting one if full); False: refuse it."""
        if len(self.open) >= self.max_connections:
            if not self.waiting:
                self.throttled.note("refused", f"refused a connection: {len(self.open)} open, all busy "
                                               "(FLEET_MCP_HTTP_MAX_CONNECTIONS)")
                return False
            oldest = next(iter(self.waiting))
            self.throttled.note("evicted", "closed the connection that waited longest on its client to make room "
                                           f"(the cap of {self.max_connections} open connections reached; "
                                           "FLEET_MCP_HTTP_MAX_CONNECTIONS)")
            self._close(oldest)
        self.open.add(connection)
        return True

    def waiting_for_request(self, connection: Any, *, served: bool = False) -> None:
        """The connection waits for a request to start: just opened, or `served` (its last answer sent)."""
        self._arm(connection, self.idle_timeout_s)
        self.reading.discard(connection)
        if served:  # closing a kept-alive connection that goes quiet is routine: no log line
            self.quiet.add(connection)

    def request_started(self, connection: Any) -> None:
        """Bytes of a request arrived; the whole request must arrive within the read timeout (set once)."""
        if connection not in self.reading:
            self.reading.add(connection)
            self.quiet.discard(connection)
            self._arm(connection, self.read_timeout_s)

    def busy(self, connection: Any) -> None:
        """The request is in: the server works on it, the client waits."""
        timer = self.waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()
        self.reading.discard(connection)
        self.quiet.discard(connection)

    def gone(self, connection: Any) -> None:
        self.busy(connection)
        self.open.discard(connection)

    def _arm(self, connection: Any, after_s: float) -> None:
        old = self.waiting.pop(connection, None)
        if old is not None:
            old.cancel()
        self.waiting[connection] = asyncio.get_running_loop().call_later(after_s, self._timed_out, connection)

    def _timed_out(self, connection: Any) -> None:
        if connection in self.reading:
            self.throttled.note("timeout:read", "closed a half-sent request (FLEET_MCP_HTTP_READ_TIMEOUT_S)")
        elif connection not in self.quiet:
            self.throttled.note("timeout:idle", "closed an idle connection (FLEET_MCP_HTTP_IDLE_TIMEOUT_S)")
        self._close(connection)

    def _close(self, connection: Any) -> None:
        self.busy(connection)
        self.open.discard(connection)
        connection.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol reporting to `guard`: pass as `uvicorn.Config(http=...)`."""
    import h11  # here, not at import: stdio serving never loads the HTTP stack
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if not guard.admit(self):
                self.refused = True
                transport.write(REFUSAL)
                transport.close()
                return
            super().connection_made(transport)
            guard.waiting_for_request(self)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.refused:
                return
            guard.gone(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._report()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                if self.conn.their_state is h11.IDLE:
                    guard.waiting_for_request(self, served=True)
                self._report()

        def _report(self) -> None:
            state = self.conn.their_state
            if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
                guard.request_started(self)
            elif state is not h11.IDLE:
                guard.busy(self)

    return Guarded
