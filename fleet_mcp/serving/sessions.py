"""Caps on streamable-HTTP sessions: per client address and in total, the oldest idle session evicted first.

Idle sessions also expire on their own after `FLEET_MCP_SESSION_IDLE_S` (the
MCP SDK's idle timeout, which FastMCP's `http_app` takes). `SessionCap` keeps
the count bounded in between: when a new session would exceed
`FLEET_MCP_MAX_SESSIONS_PER_CLIENT` for its client address or
`FLEET_MCP_MAX_SESSIONS` in all, the session idle the longest (no request in
flight, no open stream) of that client, or of anyone for the total, is ended
as a client would end it (`DELETE /mcp` with its id). When every session is
busy, a new `initialize` gets 503.

Memory bound: an idle session costs the SDK about 40-60 KB, so the default
cap (256 in all) bounds sessions to ~15 MB; measured: 3,000 abandoned sessions
from 10 addresses grow RSS by ~15 MB (unbounded before: +113 MB).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SessionCap"]

log = logging.getLogger("fleet_mcp")
SESSION_HEADER = b"mcp-session-id"


@dataclass
class _Session:
    client: str
    last_used: float
    in_flight: int = 0


class SessionCap:
    """Pure ASGI middleware in front of the MCP endpoint; see the module docstring."""

    def __init__(self, app: ASGIApp, max_sessions: int, max_per_client: int, idle_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self.max_per_client = max_per_client
        self.clock = clock
        self.sessions: dict[str, _Session] = {}

    def _count(self, client: str) -> int:
        return sum(1 for s in self.sessions.values() if s.client == client)

    def _oldest_idle(self, client: str | None, besides: str | None = None) -> str | None:
        idle = [(s.last_used, sid) for sid, s in self.sessions.items()
                if s.in_flight == 0 and sid != besides and (client is None or s.client == client)]
        return min(idle)[1] if idle else None

    def _full_and_busy(self, client: str) -> bool:
        return ((self._count(client) >= self.max_per_client and self._oldest_idle(client) is None)
                or (len(self.sessions) >= self.max_sessions and self._oldest_idle(None) is None))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        client = (scope.get("client") or ("?", 0))[0]
        sid = headers.get(SESSION_HEADER, b"").decode("latin-1") or None
        if sid is None and scope["method"] == "POST" and self._full_and_busy(client):
            body, receive = await _buffered(receive)
            if _is_initialize(body):
                await _refuse(send)
                return
        session = self.sessions.get(sid) if sid else None
        if session is not None:
            session.in_flight += 1
        created: list[str] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                if sid is None and message["status"] < 300:
                    new = dict(message.get("headers", ())).get(SESSION_HEADER)
                    if new:
                        created.append(new.decode("latin-1"))
                elif sid is not None and message["status"] == 404:  # ended or expired in the SDK
                    self.sessions.pop(sid, None)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            if session is not None:
                session.in_flight -= 1
                session.last_used = self.clock()
                if scope["method"] == "DELETE":
                    self.sessions.pop(sid or "", None)
        if created:
            self._expire()
            self.sessions[created[0]] = _Session(client, self.clock())
            await self._make_room(client, created[0])

    def _expire(self) -> None:
        # The SDK ends a session idle for idle_s on its own; forget those (with a second's margin).
        stale = self.clock() - self.idle_s - 1.0
        for sid in [sid for sid, s in self.sessions.items() if s.in_flight == 0 and s.last_used < stale]:
            del self.sessions[sid]

    async def _make_room(self, client: str, new: str) -> None:
        while self._count(client) > self.max_per_client or len(self.sessions) > self.max_sessions:
            over_client = self._count(client) > self.max_per_client
            victim = self._oldest_idle(client if over_client else None, besides=new)
            if victim is None:
                return
            await self._end(victim)

    async def _end(self, sid: str) -> None:
        self.sessions.pop(sid, None)
        scope: Scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "DELETE",
                        "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "root_path": "", "query_string": b"",
                        "headers": [(b"host", b"127.0.0.1"), (SESSION_HEADER, sid.encode("latin-1"))],
                        "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0), "state": {}}

        async def nothing() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            return None

        await self.app(scope, nothing, discard)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _is_initialize(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


async def _refuse(send: Send) -> None:
    payload = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32000, "message": "Too many open sessions, all busy; try again later"}}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"retry-after", b"5")]})
    await send({"type": "http.response.body", "body": payload})
