"""HTTP connections cannot take the server down (issue 17, item 1): idle and half-sent connections time out,
a flood of idle connections is refused while a valid client is served, the soft open-file limit is raised,
and the log stays a few lines however many connections are refused."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Iterator

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from fleet_mcp.serving.connections import REFUSAL, ConnectionGuard, Throttled
from tests.processes import WAIT_S, Running, clean_env, http_server

FLOOD = 500  # idle connections; the server's own soft limit starts at 256 and its cap is 100


@contextlib.contextmanager
def sockets(port: int, count: int, send: bytes = b"") -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            if send:
                sock.sendall(send)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes `sock` before `deadline` (reads until EOF; a 503 may come first)."""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


@pytest.mark.system
def test_idle_and_half_sent_connections_time_out(tmp_path):
    env = clean_env(FLEET_MCP_HTTP_IDLE_TIMEOUT_S="1", FLEET_MCP_HTTP_READ_TIMEOUT_S="2")
    with http_server(tmp_path, env=env) as server:
        started = time.monotonic()
        with (sockets(server.port, 20) as idle,
              sockets(server.port, 20, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n") as half_head,
              sockets(server.port, 20, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{") as
              half_body):
            deadline = started + 8
            assert all(closed_by_server(s, deadline) for s in idle)
            idle_closed = time.monotonic() - started
            assert all(closed_by_server(s, deadline) for s in half_head + half_body)
            half_closed = time.monotonic() - started
        logs = server.logs()
    assert 0.9 < idle_closed < 4, idle_closed
    assert 1.9 < half_closed < 6, half_closed
    # 60 connections closed, a line or two per kind: throttled, with a count.
    assert 1 <= logs.count("closed an idle connection") <= 2, logs
    assert 1 <= logs.count("closed a half-sent request") <= 2, logs
    assert "Traceback" not in logs


@pytest.mark.system
@pytest.mark.parametrize(("limits", "cap"), [((256, None), 100), ((100, 100), 50)], ids=["raised", "hard-100"])
def test_a_flood_of_idle_connections_does_not_lock_out_a_valid_client(tmp_path, limits, cap):
    """Soft limit 256 (raised to the hard one at start-up), cap 100; or hard limit 100: the cap is kept below it."""
    env = clean_env(FLEET_MCP_HTTP_MAX_CONNECTIONS="100", FLEET_MCP_HTTP_IDLE_TIMEOUT_S="60")
    with http_server(tmp_path, env=env, file_limit=limits, real=True) as server:
        with open(f"/proc/{server.proc.pid}/limits") as f:
            soft, hard = next(line.split()[3:5] for line in f if line.startswith("Max open files"))
        assert soft == hard  # raised from 256 at start-up
        before = len(server.logs().splitlines())
        with sockets(server.port, FLOOD) as flood:
            took = asyncio.run(one_valid_call(server.url))
            lines = server.logs().splitlines()[before:]
            alive = sum(not closed_by_server(s, time.monotonic() + 0.01) for s in flood)
        assert server.proc.poll() is None
    noise = [line for line in lines if "fleet_mcp.access" not in line and "streamable_http" not in line]
    print(f"\nflood of {FLOOD} idle connections (limits {limits}): a valid client's initialize + call took "
          f"{took * 1000:.0f} ms; {len(noise)} log lines besides access and session lines; "
          f"{alive} flood connections still open")
    assert took < 5
    assert alive <= cap  # the rest were closed to make room
    assert len(noise) <= 5, noise
    assert "Traceback" not in "\n".join(lines)


def test_a_repeated_event_is_logged_once_per_interval_with_a_count(caplog):
    now = [0.0]
    throttled = Throttled(interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="fleet_mcp"):
        for _ in range(1000):
            throttled.note("accept", "socket.accept() out of system resource")
        now[0] = 10.5
        for _ in range(5):
            throttled.note("accept", "socket.accept() out of system resource")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "(1 since the last such line" in lines[0] and "(1000 since the last such line" in lines[1]


async def one_valid_call(url: str) -> float:
    started = time.monotonic()
    async with (asyncio.timeout(WAIT_S), streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        listed = await session.call_tool("list_agents", {})
        assert not listed.is_error and listed.structured_content["agents"] == []
    return time.monotonic() - started


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Connection:
    def __init__(self) -> None:
        self.transport = _Transport()


async def test_the_cap_closes_the_longest_waiting_connection_and_refuses_when_all_are_busy():
    guard = ConnectionGuard(max_connections=2, idle_timeout_s=60, read_timeout_s=60)
    first, second, third, fourth = (_Connection() for _ in range(4))
    for connection in (first, second):
        assert guard.admit(connection)
        guard.waiting_for_request(connection)
    guard.busy(second)
    assert guard.admit(third)  # room made: the longest-waiting one goes
    assert first.transport.closed and not second.transport.closed
    guard.busy(third)
    assert not guard.admit(fourth)  # both open connections are busy: refused
    assert REFUSAL.startswith(b"HTTP/1.1 503 ") and REFUSAL.endswith(b'"details":{}}')
    for connection in (second, third):
        guard.gone(connection)
    assert not guard.open and not guard.waiting


SECRET = "Query-T0ken-Never-Logged"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A server whose HTTP token is SECRET (one for both places a client may put it: its log only grows)."""
    with http_server(tmp_path_factory.mktemp("guarded"), env=clean_env(FLEET_MCP_AUTH_TOKEN=SECRET)) as server:
        yield server


@pytest.mark.system
@pytest.mark.parametrize("secret_place", ["query", "header"])
def test_no_token_or_session_id_in_the_logs(guarded, secret_place):
    import httpx

    from tests.processes import INIT, MCP_HEADERS

    token, server = SECRET, guarded
    if secret_place == "query":
        answer = httpx.post(f"{server.url}?token={token}&access_token={token.upper()}", json=INIT,
                            headers=MCP_HEADERS, timeout=WAIT_S)
        assert answer.status_code == 401
    answer = httpx.post(server.url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
                        timeout=WAIT_S)
    session_id = answer.headers["mcp-session-id"]
    httpx.delete(server.url, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}",
                                      "mcp-session-id": session_id}, timeout=WAIT_S)
    logs = server.logs()
    assert "fleet_mcp.access" in logs and '"POST /mcp" 200' in logs
    assert token.lower() not in logs.lower()
    assert session_id not in logs


def test_log_lines_lose_session_ids_and_secrets_in_any_case():
    from fleet_mcp.serving.logs import Redact

    redact = Redact(["Tok3n-Secret"])

    def line(name: str, message: str, *args: object) -> str:
        record = logging.LogRecord(name, logging.INFO, __file__, 1, message, args, None)
        assert redact.filter(record)
        return record.getMessage()

    manager = "mcp.server.streamable_http_manager"
    assert line(manager, "Created new transport with session ID: %s", "0123456789abcdef0123456789abcdef") == \
        "Created new transport with session ID: [session]"
    assert line(manager, "Rejected request with unknown or expired session ID: %s", "tok3n-secret-as-id") == \
        "Rejected request with unknown or expired session ID: [session]"
    assert line(manager, "StreamableHTTP session manager started") == "StreamableHTTP session manager started"
    assert line("uvicorn.error", "bad header TOK3N-SECRET here") == "bad header [redacted] here"


async def test_a_kept_alive_connection_going_quiet_is_closed_without_a_log_line(caplog):
    guard = ConnectionGuard(max_connections=10, idle_timeout_s=0.01, read_timeout_s=0.01)
    fresh, served = _Connection(), _Connection()
    with caplog.at_level(logging.WARNING, logger="fleet_mcp"):
        for connection in (fresh, served):
            assert guard.admit(connection)
        guard.waiting_for_request(fresh)
        guard.waiting_for_request(served, served=True)
        for _ in range(200):  # bounded: the timers fire after 10 ms
            if fresh.transport.closed and served.transport.closed:
                break
            await asyncio.sleep(0.01)
    assert fresh.transport.closed and served.transport.closed
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["closed an idle connection"]
