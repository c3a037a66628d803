"""The Coder client on httpx's own transport, on real sockets: kept connections, their poisoning, many descriptors,
a proxy from the environment, Coder gone, and where the runner's key goes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.coder.apps import App
from fleet_mcp.coder.pools import Pools
from fleet_mcp.drivers.runner import RunnerDriver
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.server import build_server
from fleet_mcp.serving.connections import raise_fd_limit
from tests.processes import free_port
from tests.support import Tools, fleet_settings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Scripted"], Awaitable[None]]


@dataclass
class Scripted:
    """A loopback HTTP server that says exactly what its handler writes; counts connections and requests."""

    url: str = ""
    connections: int = 0
    requests: list[str] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)  # each request's head, as sent

    async def request(self, reader: asyncio.StreamReader) -> str:
        """The next request's target ("" once the client closed); its head read whole (GETs have no body)."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return ""
        target = head.split(b" ")[1].decode()
        self.requests.append(target)
        self.heads.append(head)
        return target


def answer(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


@asynccontextmanager
async def scripted(handler: Handler) -> AsyncIterator[Scripted]:
    state = Scripted()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            await handler(reader, writer, state)
        finally:
            writer.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()


async def desynchronising(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Scripted) -> None:
    """Answers each request with its own path; the first answer is followed, in the same write, by a second
    complete answer nobody asked for (a buggy or hostile proxy in front of Coder)."""
    while target := await server.request(reader):
        extra = answer({"path": "/stale"}) if len(server.requests) == 1 else b""
        writer.write(answer({"path": target}) + extra)
        await writer.drain()


async def test_bytes_past_an_answer_never_answer_the_next_request():
    paths = ["/first", "/second", "/third"]
    # The attack, against httpx's transport alone: httpcore keeps the connection, and its buffered bytes
    # answer the second request. (Should this ever fail, httpcore drops such connections itself.)
    async with scripted(desynchronising) as server, httpx.AsyncClient(base_url=server.url) as plain:
        seen = [(await plain.get(p)).json()["path"] for p in paths]
    assert seen == ["/first", "/stale", "/second"]

    app, on_app = App("o", "w", None, "s"), [f"/@o/w/apps/s{p}" for p in paths]
    async with scripted(desynchronising) as server:
        async with fleet_settings(coder_url=server.url, retry_budget_s=0).coder_client() as coder:
            seen = [(await coder.app_request("GET", app, p, dict))["path"] for p in paths]
    assert seen == on_app  # the second of three GETs gets its own answer
    assert server.requests == on_app
    assert server.connections == 2  # the poisoned connection was closed; the next one is kept for the third


async def test_the_runners_key_goes_to_the_runner_alone_never_to_coder():
    """The key rides on the runner's own requests; the wildcard lookup its first subdomain call makes on the
    way goes to Coder's API without it, as does every other request."""
    async def coder_and_runner(reader, writer, server):
        while target := await server.request(reader):
            body = {"host": "*.apps.test"} if target == "/api/v2/applications/host" else {"state": "idle"}
            writer.write(answer(body))
            await writer.drain()

    async with scripted(coder_and_runner) as server:
        port = httpx.URL(server.url).port
        settings = fleet_settings(coder_url=server.url, retry_budget_s=0, connect_to=f"*.apps.test=127.0.0.1:{port}")
        async with settings.coder_client() as coder:
            runner = RunnerDriver(coder, App("o", "w", "main", "fleet", subdomain=True), key="the-key")
            first, me = await asyncio.gather(runner.live(deadline=None), coder.app_host())
            assert (first.state, me) == ("idle", "*.apps.test")
            assert (await runner.live(deadline=None)).state == "idle"
    keyed = sorted((head.split(b" ")[1].decode(), b"\r\nx-fleet-runner-key: the-key\r\n" in head.lower())
                   for head in server.heads)
    # The wildcard asked by the runner's first call and by the plain lookup beside it, both without the key.
    assert keyed == [("/api/v2/applications/host", False)] * 2 + [("/state", True)] * 2


async def test_kept_connections_are_reused():
    async def answering(reader, writer, server):
        while target := await server.request(reader):
            writer.write(answer({"path": target}))
            await writer.drain()

    async with scripted(answering) as server:
        async with fleet_settings(coder_url=server.url, retry_budget_s=0).coder_client() as coder:
            for path in ("a", "b", "c"):
                assert (await coder.app_request("GET", App("o", "w", None, "s"), path, dict))["path"] == \
                    f"/@o/w/apps/s/{path}"
    assert server.connections == 1


async def test_a_burst_spreads_over_small_pools_and_lone_requests_keep_to_the_first():
    """coder/pools.py: httpcore's bookkeeping per request grows with the square of a pool's connections, so a
    burst is spread over several small pools; a lone request reuses the first pool's kept connection."""
    burst, arrived = 30, asyncio.Event()

    async def together(reader, writer, server):  # answers once the whole burst is in: all in flight at once
        while target := await server.request(reader):
            if len(server.requests) <= burst:
                if len(server.requests) == burst:
                    arrived.set()
                await arrived.wait()
            writer.write(answer({"path": target}))
            await writer.drain()

    app = App("o", "w", None, "s")
    async with scripted(together) as server:
        async with fleet_settings(coder_url=server.url, retry_budget_s=0).coder_client() as coder:
            pools = coder._transport
            assert isinstance(pools, Pools)
            answers = await asyncio.gather(*(coder.app_request("GET", app, f"p{i}", dict) for i in range(burst)))
            assert [a["path"] for a in answers] == [f"/@o/w/apps/s/p{i}" for i in range(burst)]
            kept: list[int] = []
            for pool in pools._pools:
                assert isinstance(pool, httpx.AsyncHTTPTransport)
                kept.append(len(pool._pool.connections))
            assert kept == [burst // len(kept)] * len(kept) and pools._busy == [0] * len(kept)
            for path in ("a", "b", "c"):
                await coder.app_request("GET", app, path, dict)
            assert pools._busy == [0] * len(kept)
    assert server.connections == burst  # the lone requests went on a kept connection


async def test_coder_requests_succeed_with_1100_descriptors_open():
    """The HTTP server lifts its descriptor limit and holds ~1,000 connections: the fleet's own sockets to Coder
    then get descriptors past 1023, which `select.select` cannot watch (the deleted transport's failure)."""
    if raise_fd_limit() < 1400:
        pytest.skip("the descriptor limit cannot be raised past 1,400 here")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1100
        emulator = Emulator()
        async with running(emulator) as url, Client(build_server(fleet_settings(coder_url=url))) as client:
            tools = Tools(client)
            created = await tools("create_agent", name="many-fds", project="fleet-demo", spec="Work [[hang]]")
            assert created["agent"]["name"] == "many-fds", created
            emulator.backend.clock.advance(30)
            for _ in range(5):  # kept connections are checked for a server's hang-up before each reuse
                shown = await tools("show_agent", agent_name="many-fds")
                assert shown["agent"]["status"] == "busy", shown
                listed = await tools("list_agents")
                assert [a["name"] for a in listed["agents"]] == ["many-fds"], listed
    finally:
        for fd in held:
            os.close(fd)


async def test_the_client_goes_through_the_proxy_the_environment_names(monkeypatch):
    async def proxy(reader, writer, server):
        while await server.request(reader):
            writer.write(answer({"version": "v2.27.1"}))
            await writer.drain()

    async with scripted(proxy) as server:
        for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", server.url)
        async with fleet_settings(coder_url="http://coder.invalid", retry_budget_s=0).coder_client() as coder:
            assert (await coder.buildinfo()).version == "v2.27.1"
    assert server.requests == ["http://coder.invalid/api/v2/buildinfo"]  # absolute form: a proxy's request


async def test_with_coder_gone_calls_fail_fast_and_name_coder_url():
    """Connection refused is not retried: the whole retry budget (20 s) stays unspent."""
    settings = fleet_settings(coder_url=f"http://127.0.0.1:{free_port()}", retry_budget_s=20.0)
    async with Client(build_server(settings)) as client:
        tools = Tools(client)
        for tool, arguments in (("wait_for_agents", {"agent_names": ["gone"], "timeout_s": 5}),
                                ("list_agents", {}), ("show_agent", {"agent_name": "gone"})):
            started = time.monotonic()
            error = await tools.error(tool, **arguments)
            took = time.monotonic() - started
            assert error["error"] == "unavailable", error
            assert "CODER_URL" in error["message"] and "connection refused" in error["message"], error
            assert took < 1.0, f"{tool} took {took:.2f} s"
