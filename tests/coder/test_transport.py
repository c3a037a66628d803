"""The lean HTTP/1.1 transport against real sockets: a scripted server says exactly what Coder might."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from fleet_mcp.coder import netcause
from fleet_mcp.coder.client import CoderClient
from fleet_mcp.coder.transport import Http11Transport, for_url
from processes import free_port
from support import fleet_settings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@dataclass
class Server:
    """A loopback server running `handler` per connection; counts connections and requests."""

    url: str = ""
    connections: int = 0
    requests: list[str] = field(default_factory=list)

    async def request(self, reader: asyncio.StreamReader) -> bytes:
        """One request read whole (head and Content-Length body); b"" when the client closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return b""
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        body = await reader.readexactly(length)
        self.requests.append(head.split(b" ")[0].decode() + " " + head.split(b" ")[1].decode())
        return head + body


def answer(body: bytes = b'{"ok": true}', *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*parts: bytes) -> bytes:
    body = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + body


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler, tls: ssl.SSLContext | None = None) -> Server:
        state = Server()

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            state.connections += 1
            try:
                await handler(reader, writer, state)
            finally:
                writer.close()

        server = await asyncio.start_server(connected, "127.0.0.1", 0, ssl=tls)
        servers.append(server)
        state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return state

    yield start
    for server in servers:
        server.close()


def client(url: str, transport: httpx.AsyncBaseTransport | None = None, timeout: float = 5.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=timeout,
                             transport=transport or Http11Transport(ssl_context=ssl.create_default_context()))


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    while await server.request(reader):
        writer.write(answer() if len(server.requests) % 2 else chunked(b'{"ok":', b' true}'))
        await writer.drain()


async def test_answers_are_read_whole_and_the_connection_kept(serve):
    server = await serve(keep_answering)
    async with client(server.url) as http:
        first = await http.get("/api/v2/buildinfo")
        second = await http.post("/api/v2/things", json={"name": "x"})
        third = await http.get("/api/v2/buildinfo?q=a%20b")
    assert [r.json() for r in (first, second, third)] == [{"ok": True}] * 3
    assert second.headers["transfer-encoding"] == "chunked"
    assert server.requests == ["GET /api/v2/buildinfo", "POST /api/v2/things", "GET /api/v2/buildinfo?q=a%20b"]
    assert server.connections == 1


async def test_concurrent_requests_each_have_a_connection_then_share_them(serve):
    server = await serve(keep_answering)
    async with client(server.url) as http:
        answers = await asyncio.gather(*(http.get(f"/n/{i}") for i in range(5)))
        assert server.connections == 5
        await asyncio.gather(*(http.get(f"/m/{i}") for i in range(5)))
    assert all(a.status_code == 200 for a in answers)
    assert server.connections == 5 and len(server.requests) == 10


async def test_a_connection_the_server_closed_is_not_used_again(serve):
    closed = asyncio.Queue()

    async def once(reader, writer, server):
        await server.request(reader)
        writer.write(answer())
        await writer.drain()
        writer.close()  # an idle keep-alive connection the server dropped
        await writer.wait_closed()
        closed.put_nowait(True)

    server = await serve(once)
    async with client(server.url) as http:
        for path in ("/a", "/b"):
            assert (await http.get(path)).json() == {"ok": True}
            await closed.get()
        assert (await http.post("/c", json={})).json() == {"ok": True}
    assert server.connections == 3 and len(server.requests) == 3


async def test_connection_close_is_honoured(serve):
    async def closing(reader, writer, server):
        while await server.request(reader):
            writer.write(answer(b"{}", "Connection: close"))
            await writer.drain()

    server = await serve(closing)
    async with client(server.url) as http:
        await http.get("/a")
        await http.get("/b")
    assert server.connections == 2


async def test_a_post_the_server_dropped_unanswered_is_never_sent_twice(serve):
    async def drops_posts(reader, writer, server):
        while request := await server.request(reader):
            if request.startswith(b"POST"):
                return  # read, maybe acted on, never answered
            writer.write(answer())
            await writer.drain()

    server = await serve(drops_posts)
    async with client(server.url) as http:
        await http.get("/warm")
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await http.post("/api/v2/users/me/workspaces", json={"name": "once"})
        assert netcause.cause(caught.value)[0] == "dropped"
        assert (await http.get("/after")).status_code == 200
    assert server.requests.count("POST /api/v2/users/me/workspaces") == 1


async def test_informational_answers_are_skipped(serve):
    async def continues(reader, writer, server):
        await server.request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b'{"after": 100}'))
        await writer.drain()

    server = await serve(continues)
    async with client(server.url) as http:
        assert (await http.get("/x")).json() == {"after": 100}


async def test_a_silent_server_is_a_read_timeout(serve):
    async def silent(reader, writer, server):
        await server.request(reader)
        await reader.read()  # until the client gives up and closes

    server = await serve(silent)
    async with client(server.url, timeout=0.2) as http:
        with pytest.raises(httpx.ReadTimeout) as caught:
            await http.get("/slow")
    assert netcause.cause(caught.value) == ("timeout", "timed out")


async def test_nothing_listening_is_refused():
    async with client(f"http://127.0.0.1:{free_port()}") as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await http.get("/")
    assert netcause.cause(caught.value)[0] == "refused"


async def test_a_garbled_answer_is_a_protocol_error(serve):
    async def garbled(reader, writer, server):
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
        await writer.drain()

    server = await serve(garbled)
    async with client(server.url) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/x")


async def test_a_streamed_answer_arrives_as_it_is_sent(serve):
    first_read = asyncio.Event()

    async def events(reader, writer, server):
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"d\r\ndata: first\n\n\r\n")
        await writer.drain()
        await first_read.wait()  # the rest only once the client has read the first event
        writer.write(b"e\r\ndata: second\n\n\r\n0\r\n\r\n")
        await writer.drain()

    server = await serve(events)
    async with client(server.url) as http, http.stream("GET", "/events") as response:
        seen = []
        async for line in response.aiter_lines():
            if line:
                seen.append(line)
                first_read.set()
    assert seen == ["data: first", "data: second"]


@pytest.mark.system
async def test_tls_with_a_trusted_and_an_untrusted_certificate(serve, tmp_path: Path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    server = await serve(keep_answering, tls=served)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with client(server.url, Http11Transport(ssl_context=trusting)) as http:
        assert (await http.get("/secure")).json() == {"ok": True}
    async with client(server.url) as http:  # the system's CAs only
        with pytest.raises(httpx.ConnectError) as caught:
            await http.get("/secure")
    assert netcause.cause(caught.value)[0] == "tls"


async def test_the_client_goes_through_the_proxy_the_environment_names(serve, monkeypatch):
    async def proxy(reader, writer, server):
        while await server.request(reader):
            writer.write(answer(b'{"version": "v2.27.1"}'))
            await writer.drain()

    server = await serve(proxy)
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    async with CoderClient(fleet_settings(coder_url="http://coder.invalid", retry_budget_s=0)) as coder:
        assert (await coder.buildinfo()).version == "v2.27.1"
    assert server.requests == ["GET http://coder.invalid/api/v2/buildinfo"]  # absolute form: a proxy's request


def test_a_proxy_in_the_environment_hands_over_to_httpx(monkeypatch):
    context = ssl.create_default_context()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(for_url("https://coder.example.com", ssl_context=context), Http11Transport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert isinstance(for_url("https://coder.example.com", ssl_context=context), httpx.AsyncHTTPTransport)
    assert isinstance(for_url("http://coder.example.com", ssl_context=context), Http11Transport)
    monkeypatch.setenv("NO_PROXY", "coder.example.com")
    assert isinstance(for_url("https://coder.example.com", ssl_context=context), Http11Transport)


async def test_a_server_hanging_up_unanswered_is_a_protocol_error_after_one_more_try(serve):
    async def hangs_up_after_the_first(reader, writer, server):
        while await server.request(reader):
            if len(server.requests) > 1:
                return  # read, then closed unanswered
            writer.write(answer())
            await writer.drain()

    server = await serve(hangs_up_after_the_first)
    async with client(server.url) as http:
        await http.get("/warm")
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/read")  # on the kept connection, then once more on a new one
    assert server.requests == ["GET /warm", "GET /read", "GET /read"] and server.connections == 2


async def test_a_cancelled_request_closes_its_connection(serve):
    asked, gone = asyncio.Event(), asyncio.Event()

    async def silent(reader, writer, server):
        await server.request(reader)
        asked.set()
        await reader.read()  # returns once the client closed its end
        gone.set()

    server = await serve(silent)
    async with client(server.url) as http:
        call = asyncio.ensure_future(http.get("/slow"))
        await asked.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(gone.wait(), 5)
