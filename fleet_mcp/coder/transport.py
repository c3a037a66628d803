"""A lean HTTP/1.1 transport for httpx: asyncio streams and h11, nothing else.

httpx's default transport (httpcore over anyio) spends about a millisecond of
CPU around each answer of a deployment that answers in tens; a fleet call makes
a few requests in sequence and `show_agents` twenty at once, so that is most of
the fleet's own time per call (`bench/run.py` measures it). This one spends
about half. It does what talking to Coder needs: HTTP/1.1 with keep-alive,
TLS, the connect/read/write timeouts httpx hands down, Content-Length and
chunked bodies, and streamed answers (the app proxy's server-sent events).
Proxies stay httpx's job: `for_url` picks httpx's own transport whenever the
environment names a proxy for the URL.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

__all__ = ["Http11Transport", "for_url"]

_READ_SIZE = 64 * 1024
_KEEP_IDLE = 20  # idle connections kept per origin
_IDLE_S = 5.0  # an idle connection older than this is closed, not reused (servers drop them too)
_MAX_CONNECTIONS = 100  # in use at once, as httpx's default limits
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

Origin = tuple[bytes, bytes, int]


def for_url(url: str, *, ssl_context: ssl.SSLContext) -> httpx.AsyncBaseTransport:
    """The transport for this Coder URL: ours, or httpx's own through the proxy the environment names
    for it (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY respected)."""
    parsed = httpx.URL(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parsed.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parsed.host):
        return httpx.AsyncHTTPTransport(proxy=proxy, verify=ssl_context)
    return Http11Transport(ssl_context=ssl_context)


def _origin(url: httpx.URL) -> Origin:
    return url.raw_scheme, url.raw_host, url.port or (443 if url.scheme == "https" else 80)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, origin: Origin) -> None:
        self.reader, self.writer, self.origin = reader, writer, origin
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.received = 0  # bytes of the current answer read so far

    async def next_event(self, timeouts: dict[str, float | None], request: httpx.Request) -> Any:
        """The next h11 event of the answer (informational answers skipped), reading as needed."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self.close()
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout(timeouts.get("read")):
                        chunk = await self.reader.read(_READ_SIZE)
                except TimeoutError as exc:
                    self.close()
                    raise httpx.ReadTimeout("Timed out waiting for the answer", request=request) from exc
                except OSError as exc:
                    self.close()
                    raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
                self.received += len(chunk)
                self.h11.receive_data(chunk)
            elif not isinstance(event, h11.InformationalResponse):
                return event

    def reusable(self) -> bool:
        """Not too old, and not closed by the server: an idle connection with something to read has been."""
        if self.reader.at_eof() or time.monotonic() - self.idle_since >= _IDLE_S:
            return False
        sock = self.writer.get_extra_info("socket")
        return sock is None or not select.select([sock], [], [], 0)[0]

    def close(self) -> None:
        self.writer.close()


class Http11Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams, a keep-alive pool per origin (scheme, host, port)."""

    def __init__(self, *, ssl_context: ssl.SSLContext) -> None:
        self._ssl = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        origin = _origin(request.url)
        body = await request.aread()
        await self._slots.acquire()
        connection = None
        try:
            connection = self._take(origin)
            reused = connection is not None
            if connection is None:
                connection = await self._connect(origin, timeouts)
            try:
                return await self._exchange(connection, request, body, timeouts)
            except _NothingAnswered as exc:
                if not reused or request.method not in _IDEMPOTENT:
                    raise exc.error from exc.__cause__
            # A kept-alive connection the server had just closed: the request never reached it.
            connection = await self._connect(origin, timeouts)
            try:
                return await self._exchange(connection, request, body, timeouts)
            except _NothingAnswered as exc:
                raise exc.error from exc.__cause__
        except BaseException:  # failed or cancelled mid-way: the connection cannot carry another request
            if connection is not None:
                connection.close()
            self._slots.release()
            raise

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _take(self, origin: Origin) -> _Connection | None:
        pool = self._idle.get(origin, [])
        while pool:
            connection = pool.pop()
            if connection.reusable():
                return connection
            connection.close()
        return None

    def release(self, connection: _Connection, reusable: bool) -> None:
        """A connection whose answer is over (`reusable`: read to its end, and kept alive) or abandoned."""
        self._slots.release()
        pool = self._idle.setdefault(connection.origin, [])
        if reusable and len(pool) < _KEEP_IDLE:
            connection.h11.start_next_cycle()
            connection.idle_since = time.monotonic()
            pool.append(connection)
        else:
            connection.close()

    async def _connect(self, origin: Origin, timeouts: dict[str, float | None]) -> _Connection:
        scheme, host, port = origin
        tls = self._ssl if scheme == b"https" else None
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                reader, writer = await asyncio.open_connection(
                    host.decode("ascii"), port, ssl=tls, server_hostname=host.decode("ascii") if tls else None,
                    limit=_READ_SIZE)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("Timed out connecting") from exc
        except OSError as exc:  # refused, unknown host, TLS (ssl.SSLError is an OSError)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer, origin)

    async def _exchange(self, connection: _Connection, request: httpx.Request, body: bytes,
                        timeouts: dict[str, float | None]) -> httpx.Response:
        conn = connection.h11
        connection.received = 0
        headers = list(request.headers.raw)
        data = conn.send(h11.Request(method=request.method, target=request.url.raw_path, headers=headers)) or b""
        if body:
            data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        try:
            connection.writer.write(data)
            async with asyncio.timeout(timeouts.get("write")):
                await connection.writer.drain()
        except (TimeoutError, OSError) as exc:
            connection.close()
            error = httpx.WriteTimeout("Timed out sending") if isinstance(exc, TimeoutError) else \
                httpx.WriteError(str(exc) or type(exc).__name__)
            raise _NothingAnswered(error) from exc
        try:
            head = await connection.next_event(timeouts, request)
        except (httpx.RemoteProtocolError, httpx.ReadError) as error:
            if not connection.received:
                raise _NothingAnswered(error) from error.__cause__
            raise
        if not isinstance(head, h11.Response):  # the connection closed before an answer
            connection.close()
            raise _NothingAnswered(httpx.RemoteProtocolError("Server disconnected without an answer",
                                                             request=request))
        return httpx.Response(head.status_code, headers=head.headers,
                              stream=_Body(self, connection, timeouts, request),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason})


class _NothingAnswered(Exception):
    """The request failed before any byte of an answer came back."""

    def __init__(self, error: httpx.HTTPError) -> None:
        super().__init__(str(error))
        self.error = error


class _Body(httpx.AsyncByteStream):
    """An answer's body, read as the caller iterates; the connection goes back to the pool at its end."""

    def __init__(self, transport: Http11Transport, connection: _Connection, timeouts: dict[str, float | None],
                 request: httpx.Request) -> None:
        self._transport, self._connection = transport, connection
        self._timeouts, self._request = timeouts, request
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._released:
            event = await self._connection.next_event(self._timeouts, self._request)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                conn = self._connection.h11
                self._release(conn.our_state is h11.DONE and conn.their_state is h11.DONE)
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                self._release(False)

    async def aclose(self) -> None:
        self._release(False)  # a body left unread: the connection cannot carry another request

    def _release(self, reusable: bool) -> None:
        if not self._released:
            self._released = True
            self._transport.release(self._connection, reusable)
