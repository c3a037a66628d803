"""Faults on the wire, per route pattern, set through the control API.

`Faults` holds the rules; `FaultMiddleware` wraps the emulator app as plain ASGI
(streams pass through unbuffered) and applies the first active rule matching a
request. Routes under `/emulator/` are never faulted. On the wire:

- latency: wait `seconds`, then the real answer.
- stall: the same with `seconds` defaulting to 60; ends at once, unanswered, when
  the client leaves, and drops the connection when the server shuts down.
- status: `code` without reaching the backend: Coder's `{message, detail?}` JSON,
  or an HTML page on app-proxy paths (`/@...`); a 429 carries `Retry-After`.
- drop: the connection closes without a byte of response (clients see
  "Server disconnected"); without a socket (ASGITransport) `ConnectionDropped` raises.
- truncate: the real status and headers, the body cut to `bytes` (or its first
  half) and Content-Length set to what is sent: a complete HTTP message whose JSON
  is invalid, so clients neither hang nor see a protocol error. A stream (no
  Content-Length) is ended cleanly after the cut.
- garbage: 200 `application/json` whose body is not JSON, without reaching the backend.
- token_expiry: after `after` more requests carrying `token`, the token is refused:
  401 on API routes, Coder's 303 to /login on app-proxy paths.
- bomb: 200 `application/json` with `Content-Encoding: gzip`, a body of about
  `inflated` / 1000 bytes that inflates to `inflated` zero bytes (default 1 GiB), as
  an agent's own server behind the app proxy may answer (Coder passes it through).
- endless: 200 `application/json`, chunked, `chunk` bytes every `interval` seconds
  until the client leaves (or `bytes` in all): a body that never ends. It needs a
  socket: an in-process transport would buffer it for ever.
"""

from __future__ import annotations

import asyncio
import functools
import html
import itertools
import json
import re
import struct
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .coder.routes import token_of

__all__ = ["ConnectionDropped", "FaultMiddleware", "Faults", "Rule", "fault_routes"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SIGNED_OUT = "You are signed out or your session has expired. Please sign in again to continue."
RATE_LIMITED = "You've been rate limited for sending more than 512 requests in 1m0s."
OPEN_ROUTES = {"/api/v2/buildinfo"}  # Coder serves these without authentication
REQUIRED = object()
KINDS: dict[str, dict[str, tuple[type, Any]]] = {  # kind -> {param: (type, default)}
    "latency": {"seconds": (float, REQUIRED)},
    "stall": {"seconds": (float, 60.0)},
    "status": {"code": (int, REQUIRED), "message": (str, None), "detail": (str, None), "retry_after": (int, None)},
    "drop": {},
    "truncate": {"bytes": (int, None)},
    "garbage": {"body": (str, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")},
    "token_expiry": {"token": (str, REQUIRED), "after": (int, 0)},
    "bomb": {"inflated": (int, 1 << 30)},
    "endless": {"chunk": (int, 64 * 1024), "interval": (float, 0.0), "bytes": (int, None)},
}
BOMB_BLOCK = 1 << 20


class ConnectionDropped(Exception):
    """A `drop` fault where there is no socket to close (in-process transports)."""


@dataclass
class Rule:
    """A fault: requests matching `match` ("METHOD /path-glob") get `kind`, `count` times (None: always)."""

    id: str
    match: str
    kind: str
    params: dict[str, Any]
    count: int | None
    method: str
    path: re.Pattern[str]
    fired: int = 0
    passed: int = 0  # token_expiry: requests let through before the token expired

    @property
    def active(self) -> bool:
        return self.count is None or self.fired < self.count

    def json(self) -> dict:
        remaining = None if self.count is None else self.count - self.fired
        return {"id": self.id, "match": self.match, "kind": self.kind, "params": self.params,
                "count": self.count, "remaining": remaining, "fired": self.fired}


def _compile(glob: str) -> re.Pattern[str]:
    """fnmatch-style: `*` any characters (`/` too), `?` one; `{name}` one path segment."""
    parts = re.findall(r"\{[^{}/]+\}|[*?]|[^*?{]+|\{", glob)
    return re.compile("".join("[^/]+" if p.startswith("{") and len(p) > 1 else ".*" if p == "*" else
                              "." if p == "?" else re.escape(p) for p in parts) + r"\Z", re.S)


def _param(kind: str, name: str, typ: type, value: Any) -> Any:
    if typ is str:
        if not isinstance(value, str):
            raise ValueError(f"{kind}: {name} must be a string")
        return value
    if isinstance(value, bool) or not isinstance(value, int if typ is int else (int, float)) or value < 0:
        raise ValueError(f"{kind}: {name} must be a non-negative {'integer' if typ is int else 'number'}")
    if kind == "status" and name == "code" and not (400 <= value <= 599 and value in HTTPStatus._value2member_map_):
        raise ValueError(f"status: code must be an HTTP error status (400-599), got {value}")
    return typ(value)


class Faults:
    """The fault rules, in the order added, and the requests they currently hold."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = headers or {}  # added to every answer a fault makes up
        self.rules: dict[str, Rule] = {}
        self._ids = itertools.count(1)
        self._holds: set[asyncio.Future] = set()

    def add(self, spec: dict) -> Rule:
        """Add `{match, kind, count?, **params}`; a ValueError says what is wrong with it."""
        spec = dict(spec)
        kind = spec.pop("kind", None)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
        match = spec.pop("match", "* *" if kind == "token_expiry" else None)
        method, _, glob = match.strip().partition(" ") if isinstance(match, str) else ("", "", "")
        glob = glob.strip()
        if not re.fullmatch(r"\*|[A-Za-z]+", method) or not glob.startswith(("/", "*")):
            raise ValueError(f'match must be "METHOD /path-glob" (method or *), e.g. "GET /api/v2/workspaces/*"; '
                             f"got {match!r}")
        count = spec.pop("count", None)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError("count must be a positive integer, or omitted for every matching request")
        params = {}
        for name, (typ, default) in KINDS[kind].items():
            value = spec.pop(name, default)
            if value is REQUIRED:
                raise ValueError(f"{kind} needs {name!r}")
            if value is not None:
                params[name] = _param(kind, name, typ, value)
        if spec:
            raise ValueError(f"unknown parameter(s) for {kind}: {', '.join(sorted(spec))}")
        rule = Rule(f"f{next(self._ids)}", f"{method.upper()} {glob}", kind, params, count, method.upper(),
                    _compile(glob))
        self.rules[rule.id] = rule
        return rule

    def remove(self, rule_id: str) -> None:
        del self.rules[rule_id]

    def clear(self) -> None:
        self.rules.clear()

    def expire_token_after(self, token: str, n: int = 0) -> Rule:
        """Refuse `token` on authenticated routes once `n` more requests carried it."""
        return self.add({"kind": "token_expiry", "token": token, "after": n})

    def pick(self, method: str, path: str, token: str | None) -> Rule | None:
        """The first active rule for this request, counted as fired."""
        for rule in self.rules.values():
            if not rule.active or rule.method not in ("*", method) or not rule.path.match(path):
                continue
            if rule.kind == "token_expiry":
                authenticated = path.startswith("/@") or (path.startswith("/api/") and path not in OPEN_ROUTES)
                if token != rule.params["token"] or not authenticated:
                    continue
                if rule.passed < rule.params["after"]:
                    rule.passed += 1
                    continue
            rule.fired += 1
            return rule
        return None

    def release(self) -> None:
        """End every held request now (the server is shutting down): their connections drop."""
        for hold in self._holds:
            if not hold.done():
                hold.set_result(None)


async def _answer(send: Send, status: int, content_type: str, body: bytes, headers: dict[str, str]) -> None:
    raw = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


@functools.lru_cache(maxsize=2)
def gzip_bomb(inflated: int) -> bytes:
    """A gzip member of `inflated` zero bytes (rounded down to MiB), about a thousandth of that in size.

    After a full flush the compressor starts afresh, so each further MiB of zeros compresses to the same
    bytes: the body is built from one such block repeated, not by compressing the whole.
    """
    zeros, blocks = bytes(BOMB_BLOCK), max(1, inflated // BOMB_BLOCK)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    block = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(blocks):
        crc = zlib.crc32(zeros, crc)
    final = b"\x03\x00"  # an empty fixed-Huffman block marked last
    return first + block * (blocks - 1) + final + struct.pack("<II", crc, (blocks * BOMB_BLOCK) & 0xFFFFFFFF)


async def _drop(send: Send) -> None:
    # uvicorn hands the app its request cycle's bound `send`; the cycle owns the transport.
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise ConnectionDropped("fault: connection dropped without a response")
    transport.close()
    for _ in range(10):  # let the server see the loss, else it answers 500 in our place
        if getattr(cycle, "disconnected", True):
            break
        await asyncio.sleep(0)


class FaultMiddleware:
    """Plain-ASGI wrapper applying `faults` to every HTTP request outside `/emulator/`."""

    def __init__(self, app: Callable, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    def release(self) -> None:
        """End held requests (called by the server on shutdown)."""
        self.faults.release()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path == "/emulator" or path.startswith("/emulator/"):
            return await self.app(scope, receive, send)
        rule = self.faults.pick(scope["method"], path, token_of(Request(scope)) if self.faults.rules else None)
        if rule is None:
            return await self.app(scope, receive, send)
        await getattr(self, "_" + rule.kind)(rule.params, scope, receive, send)

    async def _latency(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        stop, kept = loop.create_future(), []

        async def watch() -> None:  # keeps the body for the app, notices the client leaving
            while (message := await receive())["type"] != "http.disconnect":
                kept.append(message)

        watcher = asyncio.ensure_future(watch())
        watcher.add_done_callback(lambda t: t.cancelled() or t.exception())  # a failed receive: client gone
        self.faults._holds.add(stop)
        try:
            await asyncio.wait({watcher, stop}, timeout=p["seconds"], return_when=asyncio.FIRST_COMPLETED)
            gone, stopping = watcher.done(), stop.done()
        finally:
            watcher.cancel()
            self.faults._holds.discard(stop)
        if stopping:
            await _drop(send)
        elif not gone:
            async def replay() -> Message:
                return kept.pop(0) if kept else await receive()
            await self.app(scope, replay, send)

    _stall = _latency

    async def _status(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        code, headers = p["code"], dict(self.faults.headers)
        if code == 429 or "retry_after" in p:
            headers["Retry-After"] = str(p.get("retry_after", 1))
        message = p.get("message") or (RATE_LIMITED if code == 429 else f"{HTTPStatus(code).phrase}.")
        if scope["path"].startswith("/@"):
            title = html.escape(HTTPStatus(code).phrase)
            page = (f"<!DOCTYPE html>\n<html><head><title>{title}</title></head><body><h1>{title}</h1>"
                    f"<p>{html.escape(message)}</p></body></html>\n")
            return await _answer(send, code, "text/html; charset=utf-8", page.encode(), headers)
        body = {"message": message, **({"detail": p["detail"]} if p.get("detail") else {})}
        await _answer(send, code, "application/json", json.dumps(body).encode(), headers)

    async def _drop(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        await _drop(send)

    async def _garbage(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        await _answer(send, 200, "application/json", p["body"].encode(), dict(self.faults.headers))

    async def _bomb(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        headers = {**self.faults.headers, "Content-Encoding": "gzip"}
        await _answer(send, 200, "application/json", gzip_bomb(p["inflated"]), headers)

    async def _endless(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        stop = asyncio.get_running_loop().create_future()
        self.faults._holds.add(stop)
        raw = [(b"content-type", b"application/json")]
        raw += [(k.lower().encode(), v.encode()) for k, v in self.faults.headers.items()]
        piece = b'{"messages": [' + b" " * max(0, p["chunk"] - 14)
        left = p.get("bytes")
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            while not gone.is_set() and not stop.done() and (left is None or left > 0):
                body = piece if left is None else piece[:left]
                left = None if left is None else left - len(body)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                piece = b" " * max(1, p["chunk"])
                await asyncio.sleep(p["interval"])
            if left is not None and left <= 0:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client left mid-send
        finally:
            watcher.cancel()
            self.faults._holds.discard(stop)

    async def _token_expiry(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        headers = dict(self.faults.headers)
        if not scope["path"].startswith("/@"):
            body = {"message": SIGNED_OUT, "detail": "API key expired."}
            return await _answer(send, 401, "application/json", json.dumps(body).encode(), headers)
        url = Request(scope).url
        target = url.path + (f"?{url.query}" if url.query else "")
        headers["Location"] = f"{url.scheme}://{url.netloc}/login?" + urlencode({"message": SIGNED_OUT,
                                                                               "redirect": target})
        page = f'<a href="{html.escape(headers["Location"])}">See Other</a>.\n\n'
        await _answer(send, 303, "text/html; charset=utf-8", page.encode(), headers)

    async def _truncate(self, p: dict, scope: Message, receive: Receive, send: Send) -> None:
        limit, chunks = p.get("bytes"), []
        start: dict = {}
        budget: int | None = None  # for a stream: bytes still to pass
        done = False

        async def cut(message: Message) -> None:
            nonlocal budget, done
            if done:
                return  # the rest of a cut stream
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                return await send(message)
            body, more = message.get("body", b""), message.get("more_body", False)
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            if len(headers) < len(start["headers"]):  # known length: cut the whole body, fix the length
                chunks.append(body)
                if more:
                    return
                whole = b"".join(chunks)
                n = len(whole) // 2 if limit is None else min(limit, max(len(whole) - 1, 0))
                await send({**start, "headers": headers + [(b"content-length", str(n).encode())]})
                done = True
                return await send({"type": "http.response.body", "body": whole[:n]})
            if budget is None:
                budget = len(body) // 2 if limit is None else limit
                await send(start)
            piece, budget = body[:budget], budget - len(body[:budget])
            done = budget <= 0 or not more
            await send({"type": "http.response.body", "body": piece, "more_body": not done})

        await self.app(scope, receive, cut)


def fault_routes(faults: Faults, token: str) -> list[Route]:
    """`GET|POST|DELETE /emulator/faults`, `DELETE /emulator/faults/{id}`; `token` is token_expiry's default."""

    async def collection(request: Request) -> JSONResponse:
        if request.method == "POST":
            try:
                data = json.loads(await request.body() or b"null")
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object: {match, kind, count?, ...params}")
                if data.get("kind") == "token_expiry":
                    data.setdefault("token", token)
                return JSONResponse(faults.add(data).json(), 201)
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, 400)
        if request.method == "DELETE":
            faults.clear()
        return JSONResponse({"faults": [rule.json() for rule in faults.rules.values()]})

    async def one(request: Request) -> JSONResponse:
        rule_id = request.path_params["id"]
        if rule_id not in faults.rules:
            return JSONResponse({"error": f"no fault {rule_id!r}"}, 404)
        faults.remove(rule_id)
        return JSONResponse({"deleted": rule_id})

    return [Route("/emulator/faults", collection, methods=["GET", "POST", "DELETE"]),
            Route("/emulator/faults/{id}", one, methods=["DELETE"])]
