"""MCP Tasks on the wire, through real server processes: stdio, where a restarted server answers the task its
predecessor started (and a server whose client closes stdin still exits, a task in flight), and HTTP, where a
task started on one replica is polled on another, directly and behind nginx; another user's id is refused.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import (
    MODERN,
    WAIT_S,
    Lines,
    clean_env,
    fleet_command,
    nginx_binary,
    nginx_process,
    per_user_server,
    stop,
)
from tests.support import ALICE_TOKEN, TOKEN, Tools, emulator_thread
from tests.tasks_client import TasksClient

pytestmark = pytest.mark.system

TASKS = {**MODERN, "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
SITE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"


def line(request_id: int, method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": TASKS}})


def stdio_server(coder_url: str, token: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*fleet_command()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env=clean_env(CODER_URL=coder_url, CODER_SESSION_TOKEN=token,
                                          FLEET_MCP_WAIT_POLL_INTERVAL_S="0.3"))


def ask(proc: subprocess.Popen[str], out: Lines, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None
    proc.stdin.write(line(request_id, method, params) + "\n")
    proc.stdin.flush()
    while True:
        got = out.next(3 * WAIT_S)  # the first answer waits for the server to start (seconds on a busy machine)
        assert got is not None, "the server ended"
        message: dict[str, Any] = json.loads(got)
        if message.get("id") == request_id:
            return message


def test_a_restarted_stdio_server_answers_the_task_its_predecessor_started():
    with emulator_thread() as coder:
        first = stdio_server(coder.url, TOKEN)
        assert first.stdout is not None
        out = Lines(first.stdout)
        made = ask(first, out, 1, "tools/call", {"name": "create_agent", "arguments": {
            "name": "across", "project": "fleet-demo", "spec": "Work [[finish:15]]"}})
        assert not made["result"]["isError"], made
        started = ask(first, out, 2, "tools/call", {"name": "wait_for_agents", "arguments": {
            "agent_names": ["across"], "timeout_s": 120}})["result"]
        assert started["resultType"] == "task" and started["status"] == "working", started
        assert started["pollIntervalMs"] <= 10_000
        assert ask(first, out, 3, "tasks/get", {"taskId": started["taskId"]})["result"]["status"] == "working"
        assert first.stdin is not None
        first.stdin.close()  # the client goes: the server exits, the task in flight holds nothing
        assert first.wait(WAIT_S) == 0

        second = stdio_server(coder.url, TOKEN)
        try:
            assert second.stdout is not None
            out2 = Lines(second.stdout)
            t0 = time.monotonic()
            polls = [ask(second, out2, 10, "tasks/get", {"taskId": started["taskId"]})]
            first_answer_s = time.monotonic() - t0
            while polls[-1]["result"]["status"] == "working":
                time.sleep(started["pollIntervalMs"] / 1000)
                polls.append(ask(second, out2, 10 + len(polls), "tasks/get", {"taskId": started["taskId"]}))
            done = polls[-1]["result"]
            assert done["status"] == "completed", done
            assert done["result"]["structuredContent"]["met"] == ["across"]
            assert done["result"]["structuredContent"]["agents"][0]["last_turn"] == "succeeded"
            print(f"restart: first answer {first_answer_s:.2f} s after start; {len(polls)} polls")
            stranger = ask(second, out2, 99, "tasks/get", {"taskId": started["taskId"][:-4] + "AAAA"})
            assert stranger["error"]["code"] == -32602
        finally:
            stop(second)


@pytest.mark.slow
@pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (apt-get install nginx)")
async def test_a_task_started_on_one_replica_is_polled_on_the_other(tmp_path):
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport
    from mcp.shared.exceptions import MCPError

    def client(url: str, token: str, tasks: TasksClient) -> Client[StreamableHttpTransport]:
        return Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}),
                      extensions=[tasks.extension()])

    tasks = TasksClient(pause_s=0.3)
    with emulator_thread() as coder, \
            per_user_server(tmp_path, coder.url, FLEET_MCP_WAIT_POLL_INTERVAL_S="0.3") as one, \
            per_user_server(tmp_path, coder.url, FLEET_MCP_WAIT_POLL_INTERVAL_S="0.3") as two, \
            nginx_process(tmp_path, SITE.read_text(), [one.port, two.port]) as balanced:
        async with client(one.url, TOKEN, tasks) as on_one:
            await Tools(on_one)("create_agent", name="spread", project="fleet-demo", spec="Work [[finish:3]]")
            started = await on_one.session.call_tool("wait_for_agents", {"agent_names": ["spread"],
                                                                          "timeout_s": 120}, allow_claimed=True)
        assert started.status == "working"
        async with client(two.url, TOKEN, tasks) as on_two, client(balanced + "/mcp", TOKEN, tasks) as behind:
            states = [await tasks.request(on_two.session, "tasks/get", {"taskId": started.task_id})]
            assert states[0]["status"] == "working"
            while states[-1]["status"] == "working":
                time.sleep(0.3)
                states.append(await tasks.request(behind.session, "tasks/get", {"taskId": started.task_id}))
            assert states[-1]["status"] == "completed", states[-1]
            assert states[-1]["result"]["structuredContent"]["met"] == ["spread"]
        async with client(balanced + "/mcp", ALICE_TOKEN, tasks) as alice:
            with pytest.raises(MCPError) as refused:
                await tasks.request(alice.session, "tasks/get", {"taskId": started.task_id})
            assert refused.value.error.code == -32602  # another user's task: unknown to her
