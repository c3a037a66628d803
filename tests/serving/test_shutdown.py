"""Graceful shutdown of a real `fleet-mcp --emulator` process, over stdio and HTTP, on SIGTERM and SIGINT:
the tool call in flight finishes and answers, the lifespan closes the Coder client, exit code 0.

The slow call, deterministic: `delete_agent` right after `create_agent`. The new workspace's build is
still running (about 1.2 s on the emulator's real time), so delete cancels it and polls until it has
ended; with FLEET_MCP_POLL_INTERVAL_S=2 the first poll sees the build canceling and the next one comes
2 s later, so the call lasts about 2 s. The signal is sent 0.3 s into it.

Each transport takes either signal the same way (one handler for both), and each transport meets each signal here
once at least: stdio a call in flight on SIGINT and the rest on SIGTERM; HTTP a call in flight on SIGTERM, and the
second-signal test starts with SIGINT. Each case is a server process of its own (a stop ends it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from fleet_mcp.serving.run import GRACE_S
from tests.processes import WAIT_S, clean_env, fleet_command, http_server
from tests.support import TOKEN, emulator_thread

pytestmark = pytest.mark.system

SLOW_ENV = {"FLEET_MCP_POLL_INTERVAL_S": "2"}
INTO_THE_CALL_S = 0.3
CREATE = {"name": "slow", "project": "fleet-demo", "spec": "Wait. [[hang]]"}


def check_stopped(code: int | None, logs: str, sig: signal.Signals, signalled_at: float) -> None:
    assert code == 0, logs
    assert f"{sig.name} received" in logs
    assert "Coder client closed" in logs  # the lifespan's cleanup ran
    assert "Traceback" not in logs
    assert time.monotonic() - signalled_at < GRACE_S + 3


class Stdio:
    """Raw JSON-RPC over a `fleet-mcp --emulator` child's pipes (its pid is ours to signal)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin, self.stdout = proc.stdin, proc.stdout
        self.next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        self.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        await self.stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        await self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    async def answer(self, request_id: int) -> dict[str, Any]:
        while True:  # every stdout line is JSON-RPC; notifications may come first
            line = await asyncio.wait_for(self.stdout.readline(), WAIT_S)
            assert line, "stdout closed before the answer"
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = (await self.answer(await self.request("tools/call", {"name": tool, "arguments": arguments})))["result"]
        return result


@contextlib.asynccontextmanager
async def stdio_server(tmp_path: Path, **env: str) -> AsyncIterator[Stdio]:
    """`fleet-mcp --emulator` over stdio, initialized; killed if a test leaves it running."""
    with open(tmp_path / "stderr.log", "w+") as errlog:
        proc = await asyncio.create_subprocess_exec(*fleet_command(), "--emulator", stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=errlog,
                                                    env=clean_env(**env), cwd=tmp_path)
        client = Stdio(proc)
        try:
            init = await client.answer(await client.request("initialize", {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "shutdown-test", "version": "0"}}))
            assert init["result"]["serverInfo"]["name"] == "fleet-mcp"
            await client.send({"method": "notifications/initialized"})
            yield client
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_stdio_call_in_flight_finishes_then_exit_0_on_sigint(tmp_path):
    sig = signal.SIGINT
    async with stdio_server(tmp_path, **SLOW_ENV) as client:
        assert not (await client.call("create_agent", CREATE)).get("isError")
        pending = asyncio.create_task(client.call("delete_agent", {"agent_name": "slow"}))
        await asyncio.sleep(INTO_THE_CALL_S)
        assert not pending.done(), "the slow call was not slow"
        signalled_at = time.monotonic()
        client.proc.send_signal(sig)
        result = await asyncio.wait_for(pending, WAIT_S)
        assert not result.get("isError"), result
        assert result["structuredContent"]["deleted_agent"]["name"] == "slow"
        trailing = await asyncio.wait_for(client.stdout.read(), WAIT_S)
        code = await asyncio.wait_for(client.proc.wait(), WAIT_S)
    assert trailing == b""
    logs = (tmp_path / "stderr.log").read_text()
    check_stopped(code, logs, sig, signalled_at)
    assert "waiting for 1 request(s) in flight" in logs


async def test_stdio_signal_when_idle_stops_at_once(tmp_path):
    async with stdio_server(tmp_path) as client:
        assert (await client.call("list_agents", {}))["structuredContent"]["agents"] == []
        signalled_at = time.monotonic()
        client.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(client.proc.wait(), WAIT_S)
    check_stopped(code, (tmp_path / "stderr.log").read_text(), signal.SIGTERM, signalled_at)
    assert time.monotonic() - signalled_at < 2


async def test_stdio_grace_is_bounded(tmp_path):
    """A call that would outlast the grace is cancelled after GRACE_S; still exit 0 and a closed client."""
    async with stdio_server(tmp_path, FLEET_MCP_POLL_INTERVAL_S="30") as client:
        assert not (await client.call("create_agent", CREATE)).get("isError")
        await client.request("tools/call", {"name": "delete_agent", "arguments": {"agent_name": "slow"}})
        await asyncio.sleep(INTO_THE_CALL_S)
        signalled_at = time.monotonic()
        client.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(client.proc.wait(), WAIT_S)
        took = time.monotonic() - signalled_at
    logs = (tmp_path / "stderr.log").read_text()
    check_stopped(code, logs, signal.SIGTERM, signalled_at)
    assert GRACE_S - 0.5 < took < GRACE_S + 3
    assert "1 request(s) still running are cancelled" in logs


def test_http_call_in_flight_finishes_then_exit_0_on_sigterm(tmp_path):
    sig = signal.SIGTERM
    with http_server(tmp_path, env=clean_env(**SLOW_ENV)) as server:
        signalled_at, result = asyncio.run(slow_call_then_signal(server.url, server.proc, sig))
        assert not result.is_error, result.content
        assert result.structured_content["deleted_agent"]["name"] == "slow"
        try:
            code = server.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        logs = server.logs()
    check_stopped(code, logs, sig, signalled_at)
    assert "ASGI callable returned without completing response" not in logs  # the GET stream ended cleanly


async def slow_call_then_signal(url: str, proc: subprocess.Popen[bytes], sig: signal.Signals) -> tuple[float, CallToolResult]:
    async with (asyncio.timeout(WAIT_S), streamable_http_client(url, terminate_on_close=False) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        created = await session.call_tool("create_agent", CREATE)
        assert not created.is_error, created.content
        pending = asyncio.create_task(session.call_tool("delete_agent", {"agent_name": "slow"}))
        await asyncio.sleep(INTO_THE_CALL_S)
        assert not pending.done(), "the slow call was not slow"
        signalled_at = time.monotonic()
        proc.send_signal(sig)
        return signalled_at, await pending


async def test_stdio_second_signal_stops_waiting(tmp_path):
    async with stdio_server(tmp_path, FLEET_MCP_POLL_INTERVAL_S="30") as client:
        assert not (await client.call("create_agent", CREATE)).get("isError")
        await client.request("tools/call", {"name": "delete_agent", "arguments": {"agent_name": "slow"}})
        await asyncio.sleep(INTO_THE_CALL_S)
        client.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        signalled_at = time.monotonic()
        client.proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(client.proc.wait(), WAIT_S)
    check_stopped(code, (tmp_path / "stderr.log").read_text(), signal.SIGTERM, signalled_at)
    assert time.monotonic() - signalled_at < 2


def test_http_second_signal_stops_waiting(tmp_path):
    async def call_then_two_signals(url: str, proc: subprocess.Popen[bytes]) -> float:
        async with (asyncio.timeout(WAIT_S), streamable_http_client(url, terminate_on_close=False) as (read, write),
                    ClientSession(read, write) as session):
            await session.initialize()
            assert not (await session.call_tool("create_agent", CREATE)).is_error
            pending = asyncio.create_task(session.call_tool("delete_agent", {"agent_name": "slow"}))
            await asyncio.sleep(INTO_THE_CALL_S)
            proc.send_signal(signal.SIGINT)
            await asyncio.sleep(0.5)
            signalled_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, WAIT_S)
            pending.cancel()
            return signalled_at

    with http_server(tmp_path, env=clean_env(FLEET_MCP_POLL_INTERVAL_S="30")) as server:
        signalled_at = asyncio.run(call_then_two_signals(server.url, server.proc))
        code = server.proc.wait(WAIT_S)
        logs = server.logs()
    assert code == 0, logs
    assert "SIGINT received" in logs
    assert "second signal: cancelling 1 request(s) in flight" in logs
    assert "Coder client closed" in logs
    assert time.monotonic() - signalled_at < 3


def test_a_delete_cut_by_shutdown_still_requests_its_build(tmp_path):
    """SIGTERM while delete_agent has cancelled a build and waits for it: the delete build is still requested
    before the server exits (issue 17: a write is never left half done)."""
    with emulator_thread() as coder:
        control = httpx.Client(base_url=coder.url, headers={"Coder-Session-Token": TOKEN}, timeout=WAIT_S)
        control.post("/emulator/timings", json={"start_build": 60.0, "cancel": 8.0})  # slower than the 5 s grace
        env = clean_env(CODER_URL=coder.url, CODER_SESSION_TOKEN=TOKEN, FLEET_MCP_DELETE_WAIT_S="30")
        with http_server(tmp_path, env=env, command=fleet_command()) as server:
            async def delete_then_signal() -> None:
                async with (asyncio.timeout(WAIT_S), streamable_http_client(server.url) as (read, write),
                            ClientSession(read, write) as session):
                    await session.initialize()
                    created = await session.call_tool("create_agent", {"name": "cut", "project": "fleet-demo",
                                                                       "spec": "Build it"})
                    assert not created.is_error, created.content
                    pending = asyncio.create_task(session.call_tool("delete_agent", {"agent_name": "cut"}))
                    await asyncio.sleep(1.0)  # the cancel is sent; the build takes 8 s to stop
                    assert not pending.done()
                    server.proc.send_signal(signal.SIGTERM)
                    with contextlib.suppress(Exception):  # the server may close before it answers
                        await pending

            asyncio.run(delete_then_signal())
            assert server.proc.wait(WAIT_S) == 0, server.logs()
        ws = control.get("/api/v2/users/me/workspace/cut", params={"include_deleted": "true"}).json()
        builds = control.get(f"/api/v2/workspaces/{ws['id']}/builds").json()
        assert [b["transition"] for b in builds][:2] == ["delete", "start"]  # not a cancelled build alone
        assert builds[1]["job"]["status"] == "canceled"


WAIT_FOR_IDLE = {"agent_names": ["slow"], "until": ["idle"], "timeout_s": 60}


async def test_stdio_a_wait_cut_by_shutdown_answers_unavailable_with_a_retry_hint(tmp_path):
    """Issue 22 item 8: a wait in flight when the server stops answers at once, `unavailable` saying to wait
    again (never a dropped answer, never holding the stop for the grace)."""
    async with stdio_server(tmp_path) as client:
        assert not (await client.call("create_agent", CREATE)).get("isError")  # [[hang]]: never idle
        waiting = await client.request("tools/call", {"name": "wait_for_agents", "arguments": WAIT_FOR_IDLE})
        await asyncio.sleep(INTO_THE_CALL_S)
        signalled_at = time.monotonic()
        client.proc.send_signal(signal.SIGTERM)
        result = (await client.answer(waiting))["result"]
        answered = time.monotonic() - signalled_at
        code = await asyncio.wait_for(client.proc.wait(), WAIT_S)
    assert result["isError"], result
    envelope = json.loads(result["content"][0]["text"])
    assert envelope["error"] == "unavailable" and "wait_for_agents again" in envelope["message"], envelope
    assert envelope["details"]["retry_after_s"] == 1
    assert answered < 2, answered
    check_stopped(code, (tmp_path / "stderr.log").read_text(), signal.SIGTERM, signalled_at)
