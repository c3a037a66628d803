"""The process tuning serving starts with (`serving.tuning`): big answers read and kept cheaply."""

from __future__ import annotations

import asyncio
import resource

import httpx
import pytest

from fleet_mcp.serving.tuning import keep_freed_memory, read_in_big_steps

MB = 1_000_000
BODY = 8 * 1024 * 1024


def test_a_big_answers_memory_is_kept_for_the_next_one():
    """The server has glibc keep freed memory (`keep_freed_memory`): a body the size of a listing of 1,000 real
    workspaces, made again, lands in memory the process already has. By default each one is mapped afresh and
    faulted in page by page (~12,000 faults for 48 MB), every poll of a wait over a big fleet."""
    if not keep_freed_memory():
        pytest.skip("not glibc's allocator")

    def faults_making(size: int) -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        body = b"x" * size  # written whole, as a read body is
        del body
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults_making(48 * MB)
    assert faults_making(48 * MB) < 1_000


async def test_a_big_answer_is_read_in_big_steps():
    """An 8 MiB answer over a real socket reaches the fleet in fewer pieces than httpcore's own 64 KiB steps
    make (128 at least): each piece costs a pass through h11, anyio and the answer's stream."""
    body = b"x" * BODY

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % BODY + body)
        await writer.drain()
        writer.close()

    read_in_big_steps()
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        async with httpx.AsyncHTTPTransport() as transport:
            response = await transport.handle_async_request(httpx.Request("GET", url))
            assert isinstance(response.stream, httpx.AsyncByteStream)
            pieces = [piece async for piece in response.stream]
            await response.aclose()
    finally:
        server.close()
    assert b"".join(pieces) == body
    assert len(pieces) < BODY // (64 * 1024), len(pieces)
