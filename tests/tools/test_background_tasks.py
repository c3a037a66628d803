"""MCP Tasks: to a client that declares the extension (as interactive Claude Code does), wait_for_agents and
start_agent_task answer a task, polled with tasks/get; clients that do not declare it see no change.

In process, through a real MCP client (the mcp library's, with the extension's result claim) against the
emulator on its virtual clock.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastmcp.client.transports import FastMCPTransport

from fleet_mcp.emulator import Emulator
from tests.support import CheckedTransport, Tools, fleet_settings
from tests.tasks_client import TasksClient

if TYPE_CHECKING:
    from fastmcp import FastMCP

PER_POLL = {"per_request": 0.5}


@pytest.fixture
async def served(emulator, conformance):
    """A fleet server, and a way to reach it as a client declaring tasks or not."""
    from fastmcp import Client

    from fleet_mcp.server import build_server

    server = build_server(fleet_settings(), transport=CheckedTransport(httpx.ASGITransport(app=emulator.app),
                                                                       conformance))

    def connect(tasks: TasksClient | None = None) -> Client[FastMCPTransport]:
        return Client(server, extensions=[tasks.extension()] if tasks else None)

    return connect


async def make(tools: Tools, emulator: Emulator, coder: httpx.AsyncClient, *agents: tuple[str, str]) -> None:
    for name, spec in agents:
        await tools("create_agent", name=name, project="fleet-demo", spec=spec)
    emulator.advance(5)
    await coder.post("/emulator/clock", json=PER_POLL)


async def test_a_wait_goes_on_as_a_task_and_answers_what_the_blocking_wait_answers(served, emulator, coder):
    tasks = TasksClient()
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("t-one", "One [[finish:2]]"), ("t-two", "Two [[finish:4]]"))
        answer = await tools("wait_for_agents", agent_names=["t-one", "t-two"], timeout_s=60)
    assert len(tasks.created) == 1  # the call answered a task ...
    created = tasks.created[0]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert 250 <= created["pollIntervalMs"] <= 10_000 and created["ttlMs"] >= 60_000
    assert tasks.polls and tasks.polls[-1]["status"] == "completed"  # ... polled until it was over
    assert all(p["status"] == "working" and "waiting" in p["statusMessage"] for p in tasks.polls[:-1])
    # The task's result is the blocking call's answer: same fields, same meaning.
    assert set(answer) == {"agents", "met", "timed_out", "waited_s", "message"}
    assert answer["timed_out"] is False and sorted(answer["met"]) == ["t-one", "t-two"]
    assert all(a["last_turn"] == "succeeded" for a in answer["agents"])


async def test_a_client_without_the_extension_sees_a_blocking_call(served, emulator, coder):
    async with served() as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("plain", "One [[finish:2]]"))
        seen = []

        async def progress(done, total, message):
            seen.append(message)

        answer = await tools("wait_for_agents", progress=progress, agent_names=["plain"], timeout_s=60)
    assert answer["met"] == ["plain"] and seen  # held the call, with progress, as before


async def test_a_wait_over_at_once_is_no_task_and_bad_input_is_refused_at_once(served, emulator, coder):
    tasks = TasksClient()
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("done", "Quick [[finish:1]]"))
        emulator.advance(30)
        answer = await tools("wait_for_agents", agent_names=["done"], timeout_s=60)
        assert answer["met"] == ["done"] and not tasks.created
        error = await tools.error("wait_for_agents", agent_names=["done", "ghost"], timeout_s=60)
        assert error["error"] == "not_found" and not tasks.created


async def test_a_wait_that_times_out_completes_timed_out(served, emulator, coder):
    tasks = TasksClient(pause_s=0.2)
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("hanger", "Forever [[hang]]"))
        answer = await tools("wait_for_agents", agent_names=["hanger"], timeout_s=0.5)
    assert tasks.created and answer["timed_out"] is True and answer["met"] == []
    assert answer["agents"][0]["status"] == "busy" and "Timed out" in answer["message"]


async def test_task_ids_are_checked(served, emulator, coder):
    from mcp.shared.exceptions import MCPError

    tasks = TasksClient()
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("idler", "Forever [[hang]]"))
        for forged in ("fm1.e30.AAAA", "x" * 2000, "not-an-id"):
            with pytest.raises(MCPError) as refused:
                await tasks.request(client.session, "tasks/get", {"taskId": forged})
            assert refused.value.error.code == -32602 and "Unknown task" in refused.value.error.message


async def test_another_server_answers_the_id_and_another_user_cannot(served, emulator, coder, conformance):
    """What a restart or another replica sees: a server that never saw the task answers its id; a server acting
    for another Coder user refuses it."""
    from fastmcp import Client
    from mcp.shared.exceptions import MCPError

    from fleet_mcp.server import build_server
    from tests.support import ALICE_TOKEN

    tasks = TasksClient()
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("kept", "Long [[finish:6]]"))
        created = await client.session.call_tool("wait_for_agents", {"agent_names": ["kept"], "timeout_s": 120},
                                                 allow_claimed=True)
    task_id = created.task_id

    def another(**settings: str) -> FastMCP:
        return build_server(fleet_settings(**settings),
                            transport=CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))

    other = TasksClient()
    async with Client(another(), extensions=[other.extension()]) as restarted:
        states: list[Any] = []
        while not states or states[-1]["status"] == "working":
            states.append(await other.request(restarted.session, "tasks/get", {"taskId": task_id}))
        assert states[-1]["status"] == "completed", states[-1]
        assert states[-1]["result"]["structuredContent"]["met"] == ["kept"]
        cancelled = await other.request(restarted.session, "tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled"
        listed = (await Tools(restarted)("list_agents"))["agents"][0]
        assert listed["status"] == "idle"  # cancelling touched no agent
    async with Client(another(coder_session_token=ALICE_TOKEN), extensions=[other.extension()]) as alice:
        with pytest.raises(MCPError) as refused:
            await other.request(alice.session, "tasks/get", {"taskId": task_id})
        assert refused.value.error.code == -32602


def test_an_id_verifies_only_with_its_users_key_and_expires():
    from fleet_mcp.fleet.background import Watch
    from fleet_mcp.serving import taskids

    now = round(time.time(), 3)
    watch = Watch("wait", ("a-1", "b-2"), ("idle",), "all", now, now + 60)
    sealed = taskids.seal(watch, taskids.key_for("token-of-bob"))
    assert sealed is not None and len(sealed) <= 1024 and sealed.isascii() and sealed.isprintable()
    assert taskids.read(sealed, taskids.key_for("token-of-bob"), now) == watch
    with pytest.raises(taskids.Unknown):
        taskids.read(sealed, taskids.key_for("token-of-alice"), now)
    tampered = sealed.replace(sealed.split(".")[1], taskids.seal(
        Watch("wait", ("c-3",), ("idle",), "all", now, now + 60), b"x").split(".")[1])  # type: ignore[union-attr]
    with pytest.raises(taskids.Unknown):
        taskids.read(tampered, taskids.key_for("token-of-bob"), now)
    with pytest.raises(taskids.Expired):
        taskids.read(sealed, taskids.key_for("token-of-bob"), now + 60 + taskids.KEEP_S + 1)
    names = tuple(hashlib.sha256(str(i).encode()).hexdigest()[:20] for i in range(100))  # 20 characters each
    many = Watch("wait", names, ("idle",), "all", now, now)
    assert taskids.seal(many, b"k") is None  # too big for an id: such a wait blocks as before


async def test_a_task_handed_out_wakes_the_caller_with_the_turns_result(served, emulator, coder):
    tasks = TasksClient()
    async with served(tasks) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("worker", "First [[finish:1]]"))
        emulator.advance(30)
        handed = await tools("start_agent_task", agent_name="worker", task_description="Then this [[finish:3]]")
        refused = await tools.error("start_agent_task", agent_name="ghost", task_description="Anything")
    assert len(tasks.created) == 1 and refused["error"] == "not_found"  # a refusal answers at once
    assert tasks.created[0]["statusMessage"]  # what start_agent_task said on sending it
    assert tasks.polls[0]["statusMessage"].startswith("0 of 1 agent reached idle/stopped/failed; waiting")
    # start_agent_task's own shape, once the turn is over: the finished turn and its outcome.
    assert set(handed) == {"task", "agent_status", "message"} and handed["agent_status"] == "idle"
    assert handed["task"]["state"] == "complete" and handed["task"]["message"] == "Then this [[finish:3]]"
    assert handed["message"].startswith("worker's turn is over: succeeded.")


async def test_tasks_off_serves_every_client_blocking(emulator, conformance, coder):
    from fastmcp import Client

    from fleet_mcp.server import build_server

    server = build_server(fleet_settings(tasks="off"),
                          transport=CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    tasks = TasksClient()
    async with Client(server, extensions=[tasks.extension()]) as client:
        tools = Tools(client)
        await make(tools, emulator, coder, ("blocked", "One [[finish:2]]"))
        answer = await tools("wait_for_agents", agent_names=["blocked"], timeout_s=60)
    assert answer["met"] == ["blocked"] and not tasks.created
