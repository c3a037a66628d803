"""Answers read within bounds: a size cap per kind of answer, counted after decompression.

Coder's app proxy passes a workspace app's body and `Content-Encoding` through
unchanged, and the app is the agent's to replace: a 1 MiB gzip body can inflate
to a gibibyte, or a body can never end. So every answer is streamed, inflated
here in steps of at most `STEP` bytes (httpx's own decoder inflates each network
read whole, up to ~64 MiB from one 64 KiB read of a bomb), and abandoned once
its decoded size passes the cap for its kind. The caller bounds the time.

A connection that received bytes past the end of its answer is marked failed
before it goes back to the pool, so it is closed rather than reused: httpcore
would otherwise hand those bytes to the next request as its answer.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import httpx
from httpx_sse import EventSource, ServerSentEvent

__all__ = ["ERROR_BODY", "LIMITS", "STEP", "Limit", "TooLarge", "Undecodable", "events", "read"]

MiB = 1 << 20
Limit = Literal["status", "record", "conversation", "listing", "events"]
LIMITS: dict[Limit, int] = {
    "status": 1 * MiB,  # an agent's state or status, the answer to a write, who the token is
    "events": 1 * MiB,  # what an agent's event stream replays before it goes live
    "record": 8 * MiB,  # one workspace, build, template or version; a template's parameters, presets, resources
    "conversation": 16 * MiB,  # an agent's whole conversation, or its turns' results
    "listing": 256 * MiB,  # the fleet's workspaces (a real one: ~40 KB, up to 220 KB with a long history), builds
}
ERROR_BODY = 64 * 1024  # of an error answer, only this much is read: enough for any message Coder writes
STEP = 64 * 1024  # most bytes inflated at once


class TooLarge(Exception):
    """The answer's decoded body is over `cap` bytes."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"over {cap // MiB} MiB" if cap >= MiB else f"over {cap // 1024} KiB")
        self.cap = cap


class Undecodable(Exception):
    """The body's `Content-Encoding` is unknown, or its compressed data is corrupt."""


class _Inflater:
    """One body's decoder for `Content-Encoding` identity, gzip or deflate (zlib-wrapped or raw)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding.strip().lower()
        if self.encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise Undecodable(f"unsupported Content-Encoding {encoding[:40]!r}")
        wbits = 16 + zlib.MAX_WBITS if "gzip" in self.encoding else zlib.MAX_WBITS
        self._z = zlib.decompressobj(wbits) if self.encoding not in ("", "identity") else None
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, inflated in pieces of at most `STEP` (identity: `data` itself, already in
        memory: cutting a listing's 1 MiB reads into 64 KiB copies cost a copy of the body, 720 steps)."""
        if self._z is None:
            yield data
            return
        while True:
            try:
                out = self._z.decompress(data, STEP)
            except zlib.error as exc:
                if self.encoding == "deflate" and not self._started:  # raw deflate, as some servers send it
                    self._z, self._started = zlib.decompressobj(-zlib.MAX_WBITS), True
                    continue
                raise Undecodable(f"corrupt {self.encoding} data") from exc
            self._started = True
            if out:
                yield out
            data = self._z.unconsumed_tail
            if not data and len(out) < STEP:
                return


async def _decoded(response: httpx.Response, cap: int) -> AsyncIterator[bytes]:
    if response.is_stream_consumed:  # read already, and decoded, by a transport wrapped around the network's
        if len(response.content) > cap:
            raise TooLarge(cap)
        yield response.content
        return
    declared = response.headers.get("content-length", "")
    encoding = response.headers.get("content-encoding", "")
    if declared.isdigit() and int(declared) > cap and encoding.strip().lower() in ("", "identity"):
        raise TooLarge(cap)  # said up front: not a byte need be read
    inflater, size = _Inflater(encoding), 0
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    async for raw in stream:  # not aiter_raw(), which hands the connection back before it can be checked
        for piece in inflater.feed(raw):
            size += len(piece)
            if size > cap:
                if (room := len(piece) - (size - cap)) > 0:  # what fits: a stream's reader has it before the end
                    yield piece[:room]
                raise TooLarge(cap)
            yield piece
    _drop_if_desynchronised(response)


async def read(response: httpx.Response, cap: int, *, truncate: bool = False) -> bytes:
    """The whole decoded body, at most `cap` bytes; `TooLarge` past it (`truncate`: its first `cap` bytes)."""
    # Written into one growing buffer, each piece dropped as it lands: joining kept pieces would hold the
    # body twice, and a listing of 1,000 real workspaces is 47 MB, in memory the process must fault in anew.
    body = io.BytesIO()
    try:
        async for piece in _decoded(response, cap if not truncate else cap + STEP):
            body.write(piece)
            if truncate and body.tell() >= cap:
                break
    except TooLarge:
        if not truncate:
            raise
    return body.getvalue()[:cap]  # the buffer itself, not a copy (BytesIO hands over its bytes)


async def events(response: httpx.Response, cap: int) -> AsyncIterator[ServerSentEvent]:
    """The body's server-sent events as they arrive, read by httpx-sse from the bounded, inflated bytes;
    `TooLarge` once `cap` bytes have come."""
    inflated = httpx.Response(response.status_code, headers=[("content-type", "text/event-stream")],
                              stream=_Chunks(_decoded(response, cap)))
    async for event in EventSource(inflated).aiter_sse():
        yield event


class _Chunks(httpx.AsyncByteStream):
    """Bytes already inflated and counted, as the body of a response httpx-sse reads."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk


def _drop_if_desynchronised(response: httpx.Response) -> None:
    """Mark the answer's HTTP/1.1 connection failed when it holds bytes past the answer's end.

    The server sent them before any next request: they can only be garbage or an answer to nothing, and
    httpcore (1.0.x) would keep them buffered and read them as the next request's answer. A failed
    connection is closed when the answer is, never reused. httpx exposes no seam here, so the h11 state
    is found through the response's stream (httpx -> httpcore pool -> HTTP/1.1 connection).
    """
    state = _h11_state(response.stream)
    if state is not None and state.trailing_data[0]:
        state.send_failed()


def _h11_state(stream: object) -> Any:
    seen = 0
    while stream is not None and seen < 6:
        if (state := getattr(stream, "_h11_state", None)) is not None:
            return state if hasattr(state, "trailing_data") and hasattr(state, "send_failed") else None
        stream = next((s for name in ("_connection", "_stream", "_httpcore_stream")
                       if (s := getattr(stream, name, None)) is not None), None)
        seen += 1
    return None
