"""Behind nginx (deploy/nginx.conf, two per-user replicas), a replica dies with a call in flight.

Writes (issue 22 item 7): each write tool's write reaches Coder or the agent and is done, its answer held;
the replica serving the call is then killed (SIGKILL). nginx must not hand the call to the other replica:
each write happens at most once, and the caller gets an answer it can act on.

Waits (issue 22 item 10): eight clients wait in wait_for_agents while one replica gets SIGTERM (a rolling
restart): every wait gets an answer, its result or `unavailable` with a retry hint, never a transport error.
"""

from __future__ import annotations

import asyncio
import queue
import re
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import in_background
from tests.processes import Running, audit_lines, free_port, nginx_binary, nginx_process, per_user_server, pid_with_port
from tests.support import TOKEN, Tools, http_tools

pytestmark = [pytest.mark.system, pytest.mark.slow,
              pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (apt-get install nginx)")]

SITE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
BUILDS = ("POST", r"/api/v2/workspaces/[^/]+/builds")
KEYS = ("POST", r"/@[^/]+/[^/]+/apps/ccw/message")  # keys and messages typed to the agent through AgentAPI
WRITES = {  # tool: (arguments, the write it makes, the agent it acts on: (spec, stopped?))
    "create_agent": ({"name": "w-create", "project": "fleet-demo", "spec": "Hello"},
                     ("POST", r"/api/v2/users/[^/]+/workspaces"), None),
    "start_agent_task": ({"agent_name": "w-task", "task_description": "Just once [[finish:60]]"}, KEYS,
                         ("Warm up [[finish:1]]", False)),
    "cancel_agent_task": ({"agent_name": "w-cancel"}, KEYS, ("Forever [[hang]]", False)),
    "answer_agent": ({"agent_name": "w-answer", "decision": "allow"}, KEYS,
                     ("Run the tests [[permission]] [[finish:60]]", False)),
    "stop_agent": ({"agent_name": "w-stop"}, BUILDS, ("Idle [[finish:1]]", False)),
    "start_agent": ({"agent_name": "w-start"}, BUILDS, ("Idle [[finish:1]]", True)),
    "delete_agent": ({"agent_name": "w-delete"}, BUILDS, ("Idle [[finish:1]]", False)),
}
HOLD_S = 15.0  # longest a held answer waits for its client to leave


class HoldAnswer:
    """Around the emulator's app: the first request of a route `arm`ed is served in full (its write is done),
    then its answer is held until the client goes away; the client's port is put on `held`. Every request of
    the armed route is counted in `writes`."""

    def __init__(self, app) -> None:
        self.app = app
        self.route: tuple[str, re.Pattern[str]] | None = None
        self.writes = 0
        self.held: queue.Queue[int] = queue.Queue()

    def arm(self, method: str, path: str) -> None:
        self.route, self.writes = (method, re.compile(path)), 0

    def release(self) -> None:  # the emulator's server ends held requests at shutdown
        getattr(self.app, "release", lambda: None)()

    async def __call__(self, scope, receive, send) -> None:
        route = self.route
        if scope["type"] != "http" or route is None or scope["method"] != route[0] or \
                not route[1].fullmatch(scope["path"]):
            return await self.app(scope, receive, send)
        self.writes += 1
        if self.writes > 1:
            return await self.app(scope, receive, send)
        answer: list[dict] = []

        async def keep(message: dict) -> None:
            answer.append(message)

        await self.app(scope, receive, keep)
        self.held.put(scope["client"][1])
        try:
            async with asyncio.timeout(HOLD_S):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            for message in answer:
                await send(message)


def prepare(emulator: Emulator) -> None:
    """One running agent per write tool that needs one (as the tool needs it: idle, busy, asking, stopped)."""
    b = emulator.backend
    demo = next(u for u in b.users.values() if u.username == "demo")
    template = next(t for t in b.templates.values() if t.name == "fleet-demo")
    made = {}
    for arguments, _, agent in WRITES.values():
        if agent is not None:
            made[arguments["agent_name"]] = (b.create_workspace(demo, "me", {
                "name": arguments["agent_name"], "template_id": template.id, "rich_parameter_values": [
                    {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_project", "value": "fleet-demo"},
                    {"name": "fleet_mcp_agent_spec", "value": agent[0]},
                    {"name": "fleet_mcp_current_task", "value": agent[0]}]}), agent[1])
    b.clock.advance(30)
    for ws, stopped in made.values():
        if stopped:
            b.create_build(demo, ws.id, {"transition": "stop"})
    b.clock.advance(30)
    b.time_per_request = 0.2  # polls see time move


async def kill_in_flight(base: str, tool: str, hold: HoldAnswer, replicas: list) -> tuple[object, int]:
    """Call `tool` through nginx; once its write is done and held, SIGKILL the replica that made it. What the
    caller got, and which replica was killed."""
    async with http_tools(base + "/mcp", TOKEN) as client:
        arguments = dict(WRITES[tool][0])
        if tool == "answer_agent":  # the prompt it answers, read as an orchestrator reads it (no write: not held)
            shown = await Tools(client)("show_agent", agent_name=arguments["agent_name"])
            arguments["prompt_id"] = shown["agent"]["pending"]["prompt_id"]
        call = asyncio.create_task(Tools(client)(tool, **arguments))
        port = await asyncio.to_thread(hold.held.get, True, 30)
        pid = pid_with_port(port, [r.proc.pid for r in replicas])
        assert pid is not None, f"no replica holds port {port}"
        killed = next(n for n, r in enumerate(replicas) if r.proc.pid == pid)
        replicas[killed].proc.kill()
        try:
            return await asyncio.wait_for(call, 30), killed
        except Exception as exc:  # noqa: BLE001 - what the caller gets is what this test looks at
            return exc, killed


def test_a_replica_killed_with_each_write_in_flight_writes_at_most_once(tmp_path, capsys):
    emulator = Emulator(token=TOKEN)
    prepare(emulator)
    hold = HoldAnswer(emulator.app)
    emulator.app = hold
    close = in_background(emulator)
    got: dict[str, tuple[int, object, int]] = {}  # tool: (writes done, what the caller got, calls served)
    try:
        with ExitStack() as stack:
            ports, logs = [free_port(), free_port()], []

            def replica(port: int) -> Running:  # a fresh replica on that port
                here = tmp_path / f"replica-{len(logs)}"
                here.mkdir()
                logs.append(here / "audit.jsonl")
                return stack.enter_context(per_user_server(here, emulator.url, port=port, FLEET_MCP_MAX_AGENTS="0",
                                                           FLEET_MCP_AUDIT_LOG=str(logs[-1])))

            replicas = [replica(port) for port in ports]
            for tool, (_, write, _) in WRITES.items():
                (tmp_path / tool).mkdir()
                # A fresh nginx for each tool: none remembers a replica as failed, so each may replay the call.
                with nginx_process(tmp_path / tool, SITE.read_text(), ports) as base:
                    hold.arm(*write)
                    answer, killed = asyncio.run(kill_in_flight(base, tool, hold, replicas))
                    time.sleep(0.5)  # a replay would have reached the emulator by now (none must)
                    hold.route = None
                served = sum(line["tool"] == tool for log in logs for line in audit_lines(log))
                got[tool] = (hold.writes, answer, served)
                replicas[killed] = replica(ports[killed])
    finally:
        close()
    with capsys.disabled():
        print("\nreplica killed with the write in flight: " + ", ".join(
            f"{tool} {writes}x ({_said(answer)})" for tool, (writes, answer, _) in got.items()))
    assert {tool: writes for tool, (writes, _, _) in got.items()} == dict.fromkeys(WRITES, 1)
    # No replica served the call to its end: the killed one died in it, and nginx gave it to no other.
    assert {tool: served for tool, (_, _, served) in got.items()} == dict.fromkeys(WRITES, 0)
    for tool, (_, answer, _) in got.items():
        assert _actionable(answer), (tool, answer)
    b = emulator.backend
    assert Counter(w.name for w in b.workspaces.values())["w-create"] == 1
    task = WRITES["start_agent_task"][0]["task_description"]
    session = b.sessions[next(w.id for w in b.workspaces.values() if w.name == "w-task")]
    assert [m.content for m in session.messages if m.role == "user"].count(task) == 1  # type: ignore[attr-defined]


def _said(answer: object) -> str:
    if isinstance(answer, Exception):
        return f"{type(answer).__name__}: {str(answer)[:80]}"
    return str(answer.get("error", "ok")) if isinstance(answer, dict) else repr(answer)[:80]


def _actionable(answer: object) -> bool:
    """An answer the caller can act on: the tool's own result or error envelope, or the balancer's JSON-RPC error
    saying the replica went away and to look before repeating a write (never a bare transport error)."""
    if isinstance(answer, dict):
        return True
    return "replica serving this call went away" in str(answer) and "before repeating it" in str(answer)


WAITERS = 8


def test_waits_cut_by_a_rolling_restart_all_get_an_answer(tmp_path, capsys):
    """Issue 22 item 10: eight clients blocked in wait_for_agents behind nginx, one replica gets SIGTERM."""
    emulator = Emulator(token=TOKEN)
    b = emulator.backend
    demo = next(u for u in b.users.values() if u.username == "demo")
    template = next(t for t in b.templates.values() if t.name == "fleet-demo")
    b.create_workspace(demo, "me", {"name": "busy", "template_id": template.id, "rich_parameter_values": [
        {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_agent_spec", "value": "[[hang]]"}]})
    b.clock.advance(30)
    close = in_background(emulator)
    try:
        with ExitStack() as stack:
            replicas = []
            for name in ("a", "b"):
                (tmp_path / name).mkdir()
                replicas.append(stack.enter_context(per_user_server(
                    tmp_path / name, emulator.url, FLEET_MCP_PROGRESS_INTERVAL_S="0.2",
                    FLEET_MCP_AUDIT_LOG=str(tmp_path / name / "audit.jsonl"))))
            base = stack.enter_context(nginx_process(tmp_path, SITE.read_text(), [r.port for r in replicas]))
            firsts, finals, exit_code, stopped_in = asyncio.run(rolling_restart(base, replicas[0]))
    finally:
        close()
    cut = [a for a in firsts if a.get("error") == "unavailable"]
    with capsys.disabled():
        print(f"\nrolling restart: {WAITERS} waits, {len(cut)} cut by the stopping replica (unavailable, retried), "
              f"{WAITERS - len(cut)} answered their result; transport errors "
              f"{sum(isinstance(a, Exception) for a in firsts + finals)}; replica a exit {exit_code} in "
              f"{stopped_in:.2f} s")
    assert all(isinstance(a, dict) for a in firsts), firsts
    assert all(a.get("timed_out") is True or (a["error"] == "unavailable" and a["details"]["retry_after_s"] == 1)
               for a in firsts), firsts
    assert cut, "no wait was on the replica stopped"
    assert all(isinstance(a, dict) and a.get("timed_out") is True for a in finals), [repr(a) for a in finals]  # each retry served
    assert exit_code == 0 and stopped_in < 3  # the waits answered at once: no grace spent on them


async def rolling_restart(base: str, victim) -> tuple[list, list, int, float]:
    """WAITERS clients wait (until idle, on an agent that never is); once every wait has reported progress,
    `victim` gets SIGTERM. A wait cut with `unavailable` is called again once, as its hint says."""
    started = [asyncio.Event() for _ in range(WAITERS)]

    async def waiter(n: int) -> tuple[object, object]:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            started[n].set()

        async with http_tools(base + "/mcp", TOKEN) as client:
            tools = Tools(client)
            arguments = {"agent_names": ["busy"], "until": ["idle"], "timeout_s": 4}
            try:
                first = await tools("wait_for_agents", progress=progress, **arguments)
            except Exception as exc:  # noqa: BLE001 - a transport error is the finding this test looks for
                return exc, exc
            if first.get("error") != "unavailable":
                return first, first
            try:
                return first, await tools("wait_for_agents", **{**arguments, "timeout_s": 1})
            except Exception as exc:  # noqa: BLE001
                return first, exc

    waits = [asyncio.create_task(waiter(n)) for n in range(WAITERS)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 20)
    signalled = time.monotonic()
    victim.proc.terminate()
    exit_code = await asyncio.to_thread(victim.proc.wait, 20)
    stopped_in = time.monotonic() - signalled
    answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
    return [a for a, _ in answers], [f for _, f in answers], exit_code, stopped_in
