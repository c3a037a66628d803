"""Several small connection pools in place of one big one, for bursts of concurrent requests.

httpcore 1.0's pool walks all its connections, and for each idle one all of them again, every time a
request starts or an answer is closed (encode/httpcore#1035; linear only in pydantic's httpcore2 fork).
A show_agents of 20 agents holds 21 connections at once: that bookkeeping was a third to a half of the
server's CPU for the call. Here each request goes to the pool with the fewest requests in flight (the
first on a tie), so a lone request reuses the first pool's connections and a burst spreads over all of
them, each pool's walks staying short. httpx's transport does all the HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

__all__ = ["Pools"]


class Pools(httpx.AsyncBaseTransport):
    """`count` transports made by `make`, each request sent on the least busy one."""

    def __init__(self, make: Callable[[], httpx.AsyncBaseTransport], count: int) -> None:
        self._pools = [make() for _ in range(count)]
        self._busy = [0] * count  # requests in flight on each: sent, their answer not closed yet

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        i = self._busy.index(min(self._busy))
        self._busy[i] += 1
        try:
            response = await self._pools[i].handle_async_request(request)
        except BaseException:
            self._busy[i] -= 1
            raise
        response.stream = _Counted(response.stream, lambda: self._done(i))
        return response

    def _done(self, i: int) -> None:
        self._busy[i] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Counted(httpx.AsyncByteStream):
    """An answer's body, counted off its pool once closed. `_stream` is the one wrapped: the name
    `bounded._h11_state` follows down to the connection."""

    def __init__(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream, done: Callable[[], None]) -> None:
        self._stream = stream
        self._done: Callable[[], None] | None = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._stream, httpx.AsyncByteStream)
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            assert isinstance(self._stream, httpx.AsyncByteStream)
            await self._stream.aclose()
        finally:
            done, self._done = self._done, None
            if done is not None:  # once, however often it is closed
                done()
