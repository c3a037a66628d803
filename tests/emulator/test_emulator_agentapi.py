"""AgentAPI and the scripted Claude Code behind the emulator's app proxy, through HTTP only.

The virtual clock drives every turn (`emulator.advance`); the event stream runs
on a real loopback socket (fact 15: ASGITransport buffers whole responses).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator import REAL_TIME, Emulator
from fleet_mcp.emulator.app import running
from tests.support import TOKEN, create_workspace

BUSY = "failed to send message: message can only be sent when the agent is waiting for user input"
PR = "https://github.com/example/repo/pull/"


def app(name: str, rest: str = "") -> str:
    return f"/@demo/{name}/apps/ccw/{rest}"


async def agent_status(coder: httpx.AsyncClient, name: str) -> str:
    r = await coder.get(app(name, "status"))
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status


async def until(coder: httpx.AsyncClient, emulator: Emulator, name: str, want: str, limit: float = 30) -> None:
    """Advance the clock in small steps until AgentAPI's status is `want`."""
    for _ in range(int(limit / 0.25)):
        r = await coder.get(app(name, "status"))
        if r.status_code == 200 and r.json()["status"] == want:
            return
        emulator.advance(0.25)
    raise AssertionError(f"{name} never became {want}")


async def agent(coder: httpx.AsyncClient, emulator: Emulator, name: str, spec: str = "", task: str = "") -> dict[str, Any]:
    """A fleet workspace whose AgentAPI answers (its first turn has just begun)."""
    params = {"fleet_mcp_managed": "true", "fleet_mcp_agent_spec": spec, "fleet_mcp_current_task": task}
    r = await create_workspace(coder, name, params=params)
    assert r.status_code == 201, r.text
    for _ in range(80):
        if (await coder.get(app(name, "status"))).status_code == 200:
            body: dict[str, Any] = r.json()
            return body
        emulator.advance(0.25)
    raise AssertionError("AgentAPI never came up")


async def messages(coder: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    r = await coder.get(app(name, "messages"))
    assert r.status_code == 200, r.text
    messages: list[dict[str, Any]] = r.json()["messages"]
    return messages


async def send(coder: httpx.AsyncClient, name: str, content: str, type: str = "user") -> httpx.Response:
    return await coder.post(app(name, "message"), json={"content": content, "type": type})


async def history(coder: httpx.AsyncClient, ws: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The `ccw` app's statuses, newest first (from the newest start build), as (state, message, uri)."""
    builds = (await coder.get(f"/api/v2/workspaces/{ws['id']}/builds")).json()
    start = next(b for b in builds if b["transition"] == "start" and b["resources"])
    [ccw] = [a for a in start["resources"][0]["agents"][0]["apps"] if a["slug"] == "ccw"]
    return [(s["state"], s["message"], s["uri"]) for s in ccw["statuses"]]


async def latest(coder: httpx.AsyncClient, ws: dict[str, Any]) -> tuple[str, str, str]:
    s = (await coder.get(f"/api/v2/workspaces/{ws['id']}")).json()["latest_app_status"]
    return s["state"], s["message"], s["uri"]


def assert_problem(r: httpx.Response, status: int, detail: str, messages: list[str] | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert {k: body[k] for k in ("title", "status", "detail")} == {
        "title": {400: "Bad Request", 422: "Unprocessable Entity", 500: "Internal Server Error"}[status],
        "status": status, "detail": detail}
    if messages is not None:
        assert [e["message"] for e in body["errors"]] == messages
    return body


# --- AgentAPI's endpoints ---------------------------------------------------------

async def test_status_shape(coder):
    body = (await coder.get(app("hand-made", "status"))).json()
    assert body == {"$schema": "http://coder.test/schemas/StatusResponseBody.json", "agent_type": "claude",
                    "status": "stable", "transport": "pty"}


async def test_messages_shape(coder):
    [first] = await messages(coder, "hand-made")
    assert set(first) == {"id", "role", "content", "time"}
    assert first["id"] == 0 and first["role"] == "agent" and first["content"].startswith("> Made by hand")
    assert first["time"].endswith("Z")


async def test_first_turn_is_the_spec_without_a_user_message(coder, emulator):
    ws = await agent(coder, emulator, "writer", spec="Write the README [[finish:4]]")
    assert await agent_status(coder, "writer") == "running"
    [begun] = await messages(coder, "writer")
    assert begun["role"] == "agent" and begun["content"].startswith("> Write the README")
    await until(coder, emulator, "writer", "stable")
    [done] = await messages(coder, "writer")
    assert done["id"] == 0 and done["content"].startswith(begun["content"]) and done["content"] != begun["content"]
    assert await latest(coder, ws) == ("idle", "Done: Write the README", "")


async def test_first_prompt_falls_back_to_the_current_task_else_none(coder, emulator):
    await agent(coder, emulator, "tasked", task="Fix the login bug [[finish:1]]")
    assert (await messages(coder, "tasked"))[0]["content"].startswith("> Fix the login bug")
    ws = await agent(coder, emulator, "blank")
    await until(coder, emulator, "blank", "stable")
    assert [m["role"] for m in await messages(coder, "blank")] == ["agent"]
    assert await history(coder, ws) == [("idle", "", ""), ("working", "", "")]


async def test_user_message_refused_while_running(coder, emulator):
    await agent(coder, emulator, "busy", spec="Long job [[finish:10]]")
    r = await send(coder, "busy", "Another thing")
    body = assert_problem(r, 500, "unexpected error occurred", [BUSY])
    assert body == {"$schema": "http://coder.test/schemas/ErrorModel.json", "title": "Internal Server Error",
                    "status": 500, "detail": "unexpected error occurred", "errors": [{"message": BUSY}]}
    assert [m["role"] for m in await messages(coder, "busy")] == ["agent"]


async def test_empty_message_refused(coder):
    r = await send(coder, "hand-made", "  \n ")
    assert_problem(r, 500, "unexpected error occurred", ["failed to send message: message must not be empty"])


@pytest.mark.parametrize(("body", "where"), [
    ({"content": "hi"}, "body"),
    ({"type": "user"}, "body"),
    ({"content": "hi", "type": "user", "urgent": True}, "body.urgent"),
    ({"content": "hi", "type": "shout"}, "body.type"),
    ({"content": 42, "type": "user"}, "body.content"),
])
async def test_bad_bodies_are_422(coder, body, where):
    r = await coder.post(app("hand-made", "message"), json=body)
    problem = assert_problem(r, 422, "validation failed")
    assert [e["location"] for e in problem["errors"]] == [where]


async def test_unparsable_body_is_400(coder):
    r = await coder.post(app("hand-made", "message"), content=b"{nope", headers={"content-type": "application/json"})
    assert_problem(r, 400, "validation failed")
    assert_problem(await coder.post(app("hand-made", "message")), 400, "request body is required")


async def test_user_message_starts_a_turn_and_is_recorded(coder, emulator):
    ws = (await coder.get("/api/v2/users/demo/workspace/hand-made")).json()
    r = await send(coder, "hand-made", "  Second task [[finish:2]] ")
    assert r.status_code == 200 and r.json() == {"$schema": "http://coder.test/schemas/MessageResponseBody.json",
                                                 "ok": True}
    listed = await messages(coder, "hand-made")
    assert [(m["id"], m["role"]) for m in listed] == [(0, "agent"), (1, "user"), (2, "agent")]
    assert listed[1]["content"] == "Second task [[finish:2]]"  # trimmed
    assert await agent_status(coder, "hand-made") == "running"
    # A new user message: `working`, inheriting the last summary.
    assert await latest(coder, ws) == ("working", "Done: Made by hand", "")
    await until(coder, emulator, "hand-made", "stable")
    assert (await history(coder, ws))[:4] == [
        ("idle", "Done: Second task", ""), ("complete", "Done: Second task", ""),
        ("working", "Making changes: Second task", ""), ("working", "Working on: Second task", "")]


async def test_raw_keys_are_never_recorded(coder):
    before = await messages(coder, "hand-made")
    r = await send(coder, "hand-made", "abc", type="raw")
    assert r.status_code == 200 and r.json()["ok"] is True
    assert await messages(coder, "hand-made") == before


async def test_raw_keys_and_enter_type_a_prompt_in_the_terminal(coder, emulator):
    await send(coder, "hand-made", "Typed task [[finish:1]]", type="raw")
    await send(coder, "hand-made", "\r", type="raw")
    assert await agent_status(coder, "hand-made") == "running"
    assert [m["role"] for m in await messages(coder, "hand-made")] == ["agent"]  # typed: no user message
    assert "> Typed task" in (await messages(coder, "hand-made"))[0]["content"]


async def test_esc_interrupts_a_running_turn(coder, emulator):
    ws = await agent(coder, emulator, "stuck", spec="[[hang]] Think forever")
    emulator.advance(3)
    assert await agent_status(coder, "stuck") == "running"
    assert (await send(coder, "stuck", "\u001b", type="raw")).json()["ok"] is True
    await until(coder, emulator, "stuck", "stable", limit=2)
    states = [s for s, _, _ in await history(coder, ws)]
    assert states[0] == "idle" and "complete" not in states and "failure" not in states
    assert "Interrupted by user" in (await messages(coder, "stuck"))[0]["content"]


async def test_permission_prompt_yes_continues_to_completion(coder, emulator):
    ws = await agent(coder, emulator, "asker", spec="Deploy [[permission]] [[finish:4]]")
    await until(coder, emulator, "asker", "stable")
    assert "❯ 1. Yes\n  2. No" in (await messages(coder, "asker"))[0]["content"]
    # AgentAPI is stable at the prompt, so the MCP server reports idle; the summary stays.
    assert (await history(coder, ws))[:2] == [("idle", "Waiting for permission", ""),
                                              ("working", "Waiting for permission", "")]
    await send(coder, "asker", "1", type="raw")
    await send(coder, "asker", "\r", type="raw")
    assert await agent_status(coder, "asker") == "running"
    await until(coder, emulator, "asker", "stable")
    assert (await history(coder, ws))[:2] == [("idle", "Done: Deploy", ""), ("complete", "Done: Deploy", "")]


async def test_permission_prompt_no_ends_with_failure(coder, emulator):
    ws = await agent(coder, emulator, "denied", spec="Deploy [[permission]] [[finish:4]]")
    await until(coder, emulator, "denied", "stable")
    await send(coder, "denied", "2\r", type="raw")
    await until(coder, emulator, "denied", "stable")
    assert (await history(coder, ws))[:2] == [("idle", "Permission denied; stopped: Deploy", ""),
                                              ("failure", "Permission denied; stopped: Deploy", "")]


async def test_pr_script_reports_the_link_as_uri(coder, emulator):
    ws = await agent(coder, emulator, "pr-maker", spec="[[pr]] Add dark mode [[finish:2]]")
    await until(coder, emulator, "pr-maker", "stable")
    (idle, msg, uri), (complete, _, uri2) = (await history(coder, ws))[:2]
    assert (idle, complete) == ("idle", "complete") and msg == "Opened a pull request: Add dark mode"
    assert uri.startswith(PR) and uri == uri2  # idle keeps the link
    assert uri in (await messages(coder, "pr-maker"))[0]["content"]


async def test_fail_script_ends_with_failure(coder, emulator):
    ws = await agent(coder, emulator, "failer", spec="[[fail]] Port to COBOL [[finish:1]]")
    await until(coder, emulator, "failer", "stable")
    assert (await history(coder, ws))[:2] == [("idle", "Failed: Port to COBOL", ""),
                                              ("failure", "Failed: Port to COBOL", "")]


async def test_acp_transport_turns_raw_writes_into_prompts(coder, emulator):
    await agent(coder, emulator, "acp", spec="[[acp]] First [[finish:3]]")
    body = (await coder.get(app("acp", "status"))).json()
    assert (body["transport"], body["status"]) == ("acp", "running")
    await send(coder, "acp", "\u001b", type="raw")  # not an interrupt under ACP
    emulator.advance(1)
    assert await agent_status(coder, "acp") == "running"
    await until(coder, emulator, "acp", "stable")
    await send(coder, "acp", "  Next job [[finish:1]] ", type="raw")
    assert await agent_status(coder, "acp") == "running"
    assert "user" not in [m["role"] for m in await messages(coder, "acp")]


async def test_control_api_chooses_script_and_transport(coder, emulator):
    ws = (await coder.get("/api/v2/users/demo/workspace/hand-made")).json()
    r = await coder.post("/emulator/agents/hand-made/script", json={"script": "[[fail]] [[finish:1]]"})
    assert r.status_code == 200 and r.json()["script"]["fail"] is True
    await send(coder, "hand-made", "A plain prompt")
    await until(coder, emulator, "hand-made", "stable")
    assert (await latest(coder, ws))[:2] == ("idle", "Failed: A plain prompt")
    r = await coder.post("/emulator/agents/hand-made/script", json={"transport": "acp"})
    assert r.json()["transport"] == "acp"
    assert (await coder.get(app("hand-made", "status"))).json()["transport"] == "acp"
    assert (await coder.post("/emulator/agents/nowhere/script", json={})).status_code == 404
    assert (await coder.post("/emulator/agents/hand-made/script", json={"transport": "tty"})).status_code == 400
    r = await coder.post("/emulator/agents/alice-agent/script?owner=alice", json={"finish": 2, "pr": True})
    assert r.json()["script"] == {"finish": 2, "pr": True, "fail": False, "hang": False, "permission": False,
                                  "acp": False}


async def test_conversation_survives_a_restart(coder, emulator):
    ws = (await coder.get("/api/v2/users/demo/workspace/hand-made")).json()
    await send(coder, "hand-made", "Remember me [[finish:1]]")
    await until(coder, emulator, "hand-made", "stable")
    before = await messages(coder, "hand-made")
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    emulator.advance(5)
    assert (await coder.get(app("hand-made", "messages"))).status_code == 400  # Workspace Offline
    await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "start"})
    emulator.advance(10)
    assert await messages(coder, "hand-made") == before
    assert await agent_status(coder, "hand-made") == "stable"
    assert (await latest(coder, ws))[0] == "idle"


# --- a whole scripted session, through HTTP only ----------------------------------

async def test_full_scripted_session(coder, emulator):
    t = (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).json()
    r = await coder.post("/api/v2/users/me/workspaces", json={
        "name": "worker", "template_id": t["id"], "rich_parameter_values": [
            {"name": "fleet_mcp_managed", "value": "true"},
            {"name": "fleet_mcp_agent_spec", "value": "Implement the parser"}]})
    assert r.status_code == 201
    ws = r.json()
    for _ in range(40):
        emulator.advance(0.5)
        if (await coder.get(f"/api/v2/workspaces/{ws['id']}")).json()["latest_build"]["status"] == "running":
            break
    # First turn: the spec, straight from the command line; default script, ~5 s.
    await until(coder, emulator, "worker", "stable")
    assert [m["role"] for m in await messages(coder, "worker")] == ["agent"]
    assert await latest(coder, ws) == ("idle", "Done: Implement the parser", "")
    assert [s for s, _, _ in await history(coder, ws)] == ["idle", "complete", "working", "working", "working"]

    # Second prompt: hangs; a third is refused while it runs; ESC interrupts it.
    assert (await send(coder, "worker", "[[hang]] Optimise everything")).status_code == 200
    emulator.advance(2)
    assert_problem(await send(coder, "worker", "Too soon"), 500, "unexpected error occurred", [BUSY])
    await send(coder, "worker", "\u001b", type="raw")
    await until(coder, emulator, "worker", "stable", limit=2)
    assert (await latest(coder, ws))[0] == "idle"

    # A permission prompt, answered with raw keys.
    await send(coder, "worker", "[[permission]] [[finish:2]] Run the migrations")
    await until(coder, emulator, "worker", "stable")
    await send(coder, "worker", "1", type="raw")
    await send(coder, "worker", "\r", type="raw")
    await until(coder, emulator, "worker", "stable")
    assert await latest(coder, ws) == ("idle", "Done: Run the migrations", "")
    assert [m["role"] for m in await messages(coder, "worker")] == ["agent", "user", "agent", "user", "agent"]

    # Stop: the proxy says the workspace is offline. Delete: the workspace is gone.
    assert (await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})).status_code == 201
    emulator.advance(5)
    r = await coder.get(app("worker", "status"))
    assert r.status_code == 400 and "Workspace Offline" in r.text
    assert (await coder.post(f"/api/v2/workspaces/{ws['id']}/builds",
                             json={"transition": "delete"})).status_code == 201
    emulator.advance(5)
    assert (await coder.get(f"/api/v2/workspaces/{ws['id']}")).status_code == 410


# --- the event stream, on a real socket ---------------------------------------------

async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    event, data = "", []
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and event:
            yield event, json.loads("\n".join(data))
            event, data = "", []


async def take(events: AsyncIterator[tuple[str, dict[str, Any]]], n: int) -> list[tuple[str, dict[str, Any]]]:
    return [await asyncio.wait_for(anext(events), 5) for _ in range(n)]


def on_socket(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": TOKEN}, timeout=10)


async def test_events_replay_then_live():
    emulator = Emulator(virtual=False, timings=REAL_TIME)
    async with running(emulator) as url, on_socket(url) as c:
        async with c.stream("GET", app("hand-made", "events")) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            events = sse(r)
            (kind, first), status = await take(events, 2)
            assert kind == "message_update" and first["id"] == 0 and first["role"] == "agent"
            assert set(first) == {"id", "role", "message", "time"}
            assert status == ("status_change", {"status": "stable", "agent_type": "claude"})

            assert (await send(c, "hand-made", "Live one [[finish:0.5]]")).status_code == 200
            live = []
            async with asyncio.timeout(10):
                async for event in events:
                    live.append(event)
                    if event == ("status_change", {"status": "stable", "agent_type": "claude"}):
                        break
            assert live[0][0] == "message_update" and (live[0][1]["id"], live[0][1]["role"]) == (1, "user")
            assert ("status_change", {"status": "running", "agent_type": "claude"}) in live
            grown = [d["message"] for e, d in live if e == "message_update" and d["id"] == 2]
            assert len(grown) >= 3 and grown[-1].endswith("● Done.")  # rewritten in place, same id

            r2 = await c.post("/emulator/agents/hand-made/error", json={"message": "rate limited", "level": "warning"})
            assert r2.status_code == 200
            [(kind, error)] = await take(events, 1)
            assert kind == "agent_error" and error["message"] == "rate limited" and error["level"] == "warning"
        async with c.stream("GET", app("hand-made", "events")) as r:  # a new subscriber: the stored error last
            replay = await take(sse(r), 5)
            assert [e for e, _ in replay] == ["message_update"] * 3 + ["status_change", "agent_error"]


async def test_event_stream_ends_when_the_server_shuts_down():
    emulator = Emulator(virtual=False, timings=REAL_TIME)
    serving = running(emulator)
    url = await serving.__aenter__()
    stopped = False
    try:
        async with on_socket(url) as c, c.stream("GET", app("hand-made", "events")) as r:
            events = sse(r)
            await take(events, 2)
            began = time.monotonic()
            await serving.__aexit__(None, None, None)
            stopped = True
            async with asyncio.timeout(5):
                assert [e async for e in events] == []  # the stream ends cleanly
            assert time.monotonic() - began < 3  # well inside uvicorn's graceful timeout
    finally:
        if not stopped:
            await serving.__aexit__(None, None, None)


async def test_event_stream_ends_when_the_workspace_stops():
    emulator = Emulator(virtual=False, timings=REAL_TIME)
    async with running(emulator) as url, on_socket(url) as c:
        ws = (await c.get("/api/v2/users/demo/workspace/hand-made")).json()
        async with c.stream("GET", app("hand-made", "events")) as r:
            events = sse(r)
            await take(events, 2)
            await c.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
            async with asyncio.timeout(5):
                assert [e async for e in events] == []
        r = await c.get(app("hand-made", "events"))
        assert r.status_code == 400 and "Workspace Offline" in r.text
