"""Behind nginx (deploy/nginx.conf, two per-user replicas), a replica dies with a call in flight.

Writes (issue 22 item 7): each write tool's write reaches Coder or the agent and is done, its answer held;
the replica serving the call is then killed (SIGKILL). nginx must not hand the call to the other replica:
each write happens at most once, and the caller gets an answer it can act on.

Waits (issue 22 item 10): eight clients wait in wait_for_agents while one replica gets SIGTERM (a rolling
restart): every wait gets an answer, its result or `unavailable` with a retry hint, never a transport error.

Both tests share one emulator (in this process) and one pair of replicas; a test that kills one starts a fresh
one on its port, and each test starts with both serving.
"""

from __future__ import annotations

import asyncio
import queue
import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import in_background
from fleet_mcp.emulator.coder.state import Workspace
from tests.processes import (
    WAIT_S,
    Running,
    audit_lines,
    free_port,
    nginx_binary,
    nginx_process,
    per_user_server,
    pid_with_port,
)
from tests.support import TOKEN, Tools, http_tools

pytestmark = [pytest.mark.system, pytest.mark.slow,
              pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (apt-get install nginx)")]

SITE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
CREATE = ("POST", r"/api/v2/users/[^/]+/workspaces")
KEYS = ("POST", r"/@[^/]+/{name}(\.[^/]+)?/apps/ccw/message")  # keys and messages typed to the agent (AgentAPI)
BUILDS = ("POST", r"/api/v2/workspaces/{id}/builds")
WRITES = {  # tool: (arguments, the write it makes, the agent it acts on: (spec, stopped?))
    "create_agent": ({"name": "w-create", "project": "fleet-demo", "spec": "Hello"}, CREATE, None),
    "start_agent_task": ({"agent_name": "w-task", "task_description": "Just once [[finish:60]]"}, KEYS,
                         ("Warm up [[finish:1]]", False)),
    "cancel_agent_task": ({"agent_name": "w-cancel"}, KEYS, ("Forever [[hang]]", False)),
    "answer_agent": ({"agent_name": "w-answer", "decision": "allow"}, KEYS,
                     ("Run the tests [[permission]] [[finish:60]]", False)),
    "stop_agent": ({"agent_name": "w-stop"}, BUILDS, ("Idle [[finish:1]]", False)),
    "start_agent": ({"agent_name": "w-start"}, BUILDS, ("Idle [[finish:1]]", True)),
    "delete_agent": ({"agent_name": "w-delete"}, BUILDS, ("Idle [[finish:1]]", False)),
}
# Each write tool is called on two agents (or names) at once, so that one of its calls likely lands on the replica
# killed in a round; a round's calls that land on the other replica are refused before any write (nothing changes)
# and are called again in the next round, with the other replica as the one killed.
CASES = {f"{tool}-{n}": tool for tool in WRITES for n in (1, 2)}
ROUNDS = 6  # at most; a round tests every tool with a call on its replica (mostly all, else all but one or two)
SETTLE_S = 5.0  # after the first held answer: the other calls are held or refused by then (an SSE ping is 15 s)


def case_arguments(case: str) -> dict[str, Any]:
    arguments = dict(WRITES[CASES[case]][0])
    key = "name" if "name" in arguments else "agent_name"
    arguments[key] = f"{arguments[key]}-{case[-1]}"
    return arguments


def case_agent(case: str) -> str:
    arguments = case_arguments(case)
    name: str = arguments.get("agent_name") or arguments["name"]
    return name


class HoldAnswer:
    """Around the emulator's app, for the routes `arm`ed (one per case): a request from the replica to be killed
    is served in full (its write is done), then its answer is held until the client goes away and the case is put
    on `held`; a request from any other replica is refused (400) before any write. Every request of an armed route
    is counted in `requests`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.routes: dict[str, tuple[str, re.Pattern[str]]] = {}
        self.victim, self.pids = 0, [0]
        self.requests: Counter[str] = Counter()
        self.held: queue.Queue[str] = queue.Queue()

    def arm(self, routes: dict[str, tuple[str, str]], victim: int = 0, pids: tuple[int, ...] = (0,)) -> None:
        self.routes = {case: (method, re.compile(path)) for case, (method, path) in routes.items()}
        self.victim, self.pids, self.requests = victim, list(pids), Counter()

    def release(self) -> None:  # the emulator's server ends held requests at shutdown
        getattr(self.app, "release", lambda: None)()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cases = [case for case, (method, path) in self.routes.items() if scope["type"] == "http"
                 and scope["method"] == method and path.fullmatch(scope["path"])]
        if not cases:
            return await self.app(scope, receive, send)
        body, read = b"", receive
        if len(cases) > 1:  # creates share a route: the name in the body tells them apart
            while (message := await receive())["type"] == "http.request":
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            cases = [case for case in cases if f'"{case_agent(case)}"'.encode() in body] or cases[:1]
            first: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

            async def read() -> Message:
                return first.pop() if first else await receive()
        case = cases[0]
        self.requests[case] += 1
        if pid_with_port(scope["client"][1], self.pids) != self.victim or self.requests[case] > 1:
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": b'{"message":"Not on this replica."}'})
        answer: list[Message] = []

        async def keep(message: Message) -> None:
            answer.append(message)

        await self.app(scope, read, keep)
        self.held.put(case)
        try:
            async with asyncio.timeout(WAIT_S):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            for message in answer:
                await send(message)


def prepare(emulator: Emulator) -> dict[str, tuple[str, str]]:
    """For each case, a running agent as its tool needs it (idle, busy, asking, stopped), and the `busy` agent
    the waits wait on; each case's write route."""
    b = emulator.backend
    demo = next(u for u in b.users.values() if u.username == "demo")
    template = next(t for t in b.templates.values() if t.name == "fleet-demo")

    def create(name: str, spec: str, managed_project: bool = True) -> Workspace:
        params = [{"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_agent_spec", "value": spec}]
        if managed_project:
            params += [{"name": "fleet_mcp_project", "value": "fleet-demo"},
                       {"name": "fleet_mcp_current_task", "value": spec}]
        return b.create_workspace(demo, "me", {"name": name, "template_id": template.id,
                                               "rich_parameter_values": params})

    create("busy", "[[hang]]", managed_project=False)
    made = {case: (create(case_agent(case), agent[0]), agent[1])
            for case, tool in CASES.items() if (agent := WRITES[tool][2]) is not None}
    b.clock.advance(30)
    for ws, stopped in made.values():
        if stopped:
            b.create_build(demo, ws.id, {"transition": "stop"})
    b.clock.advance(30)
    b.time_per_request = 0.2  # polls see time move
    routes = {}
    for case, tool in CASES.items():
        method, path = WRITES[tool][1]
        routes[case] = (method, path.format(name=re.escape(case_agent(case)), id=made[case][0].id if case in made
                                            else ""))
    return routes


class Pair:
    """Two per-user replicas on fixed ports (nginx's upstreams) over the emulator; `serving` replaces any that
    died with a fresh one on its port."""

    def __init__(self, tmp_path: Path, emulator_url: str, stack: ExitStack, hold: HoldAnswer,
                 routes: dict[str, tuple[str, str]], emulator: Emulator) -> None:
        self.tmp_path, self.emulator_url, self.stack = tmp_path, emulator_url, stack
        self.hold, self.routes, self.emulator = hold, routes, emulator
        self.ports = [free_port(), free_port()]
        self.logs: list[Any] = []
        self.replicas = [self.start(port) for port in self.ports]

    def start(self, port: int) -> Running:
        here = self.tmp_path / f"replica-{len(self.logs)}"
        here.mkdir()
        self.logs.append(here / "audit.jsonl")
        return self.stack.enter_context(per_user_server(
            here, self.emulator_url, port=port, real=True, FLEET_MCP_MAX_AGENTS="0",
            FLEET_MCP_AUDIT_LOG=str(self.logs[-1])))  # real: which replica holds a connection is read by its pid

    def serving(self) -> Pair:
        for n, replica in enumerate(self.replicas):
            if replica.proc.poll() is not None:
                self.replicas[n] = self.start(self.ports[n])
        return self

    def served(self) -> Counter[str | None]:
        """Calls served to their end so far, per case (the audit logs' lines)."""
        agents = {(tool, case_agent(case)): case for case, tool in CASES.items()}
        return Counter(agents.get((line["tool"], line["arguments"].get("agent_name") or line["arguments"].get("name")))
                       for log in self.logs for line in audit_lines(log))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    emulator = Emulator(token=TOKEN)
    routes = prepare(emulator)
    hold = HoldAnswer(emulator.app)
    emulator.app = hold  # type: ignore[assignment]
    close = in_background(emulator)
    try:
        with ExitStack() as stack:
            yield Pair(tmp_path_factory.mktemp("replicas"), emulator.url, stack, hold, routes, emulator)
    finally:
        close()


def test_a_replica_killed_with_each_write_in_flight_writes_at_most_once(pair, tmp_path, capsys):
    """Rounds: every write tool not yet tested is called at once (two cases each); the calls reaching the replica
    to be killed are done and held, the rest refused; once they settle that replica is SIGKILLed while the other
    serves. A case held is tested: its write was done once, no replica served it, its caller can act."""
    got: dict[str, tuple[int, object, int, str]] = {}  # case: (requests, what the caller got, served, replica)
    rounds = 0
    for n in range(ROUNDS):
        todo = [case for case, tool in CASES.items() if not any(CASES[c] == tool for c in got)]
        if not todo:
            break
        victim, rounds = n % 2, n + 1
        replicas = pair.serving().replicas
        served_before = pair.served()
        pair.hold.arm({case: pair.routes[case] for case in todo}, replicas[victim].proc.pid,
                      tuple(r.proc.pid for r in replicas))
        try:
            (tmp_path / f"round-{n}").mkdir()
            with nginx_process(tmp_path / f"round-{n}", SITE.read_text(), pair.ports) as base:
                answers, held = asyncio.run(kill_in_flight(base, todo, pair.hold, replicas[victim]))
            time.sleep(0.5)  # a replay would have reached the emulator by now (none must)
            requests = dict(pair.hold.requests)
        finally:
            pair.hold.arm({})
        served = pair.served()
        for case in held:
            got[case] = (requests[case], answers[case], served[case] - served_before[case], "ab"[victim])
    with capsys.disabled():
        print(f"\nreplica killed with the write in flight ({rounds} rounds): " + ", ".join(
            f"{case} on {where} {writes}x ({_said(answer)})" for case, (writes, answer, _, where) in got.items()))
    assert {CASES[case] for case in got} == set(WRITES), f"untested after {ROUNDS} rounds: {set(WRITES) - set(got)}"
    assert {case: writes for case, (writes, _, _, _) in got.items()} == dict.fromkeys(got, 1)
    # No replica served the call to its end: the killed one died in it, and nginx gave it to no other.
    assert {case: served for case, (_, _, served, _) in got.items()} == dict.fromkeys(got, 0)
    for case, (_, answer, _, _) in got.items():
        assert _actionable(answer), (case, answer)
    b = pair.emulator.backend
    created = Counter(w.name for w in b.workspaces.values())
    assert all(created[case_agent(case)] == 1 for case in got if CASES[case] == "create_agent"), created
    for case in (case for case in got if CASES[case] == "start_agent_task"):
        task = WRITES["start_agent_task"][0]["task_description"]
        session = b.sessions[next(w.id for w in b.workspaces.values() if w.name == case_agent(case))]
        assert [m.content for m in session.messages if m.role == "user"].count(task) == 1


async def kill_in_flight(base: str, cases: list[str], hold: HoldAnswer, victim: Running
                         ) -> tuple[dict[str, object], set[str]]:
    """Each case's client connects through nginx (answer_agent's reads its prompt), then all call at once; once
    each call is held or answered (SETTLE_S after the first hold at most), the victim is SIGKILLed. What each
    caller got, and the cases held."""
    ready = asyncio.Event()
    connected: list[str] = []

    async def call(case: str) -> object:
        async with http_tools(base + "/mcp", TOKEN) as client:
            arguments = case_arguments(case)
            if CASES[case] == "answer_agent":  # the prompt it answers, read as an orchestrator reads it (no write)
                shown = await Tools(client)("show_agent", agent_name=arguments["agent_name"])
                arguments["prompt_id"] = shown["agent"]["pending"]["prompt_id"]
            connected.append(case)
            await ready.wait()
            try:
                return await asyncio.wait_for(Tools(client)(CASES[case], **arguments), WAIT_S)
            except Exception as exc:  # noqa: BLE001 - what the caller gets is what this test looks at
                return exc

    calls = {case: asyncio.create_task(call(case)) for case in cases}
    async with asyncio.timeout(WAIT_S):
        while len(connected) < len(cases):
            await asyncio.sleep(0.05)
    ready.set()
    held: set[str] = set()
    first_held = None
    async with asyncio.timeout(WAIT_S):
        while not all(case in held or task.done() for case, task in calls.items()):
            while not hold.held.empty():
                held.add(hold.held.get_nowait())
                first_held = first_held or time.monotonic()
            if first_held is not None and time.monotonic() > first_held + SETTLE_S:
                break
            await asyncio.sleep(0.02)
    if held:
        victim.proc.kill()
    answers = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
    while not hold.held.empty():  # held in the moment before the kill: cut by it too
        held.add(hold.held.get_nowait())
    return answers, held


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


def test_waits_cut_by_a_rolling_restart_all_get_an_answer(pair, tmp_path, capsys):
    """Issue 22 item 10: eight clients blocked in wait_for_agents behind nginx, one replica gets SIGTERM."""
    replicas = pair.serving().replicas
    with nginx_process(tmp_path, SITE.read_text(), pair.ports) as base:
        firsts, finals, exit_code, stopped_in = asyncio.run(rolling_restart(base, replicas[0]))
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


async def rolling_restart(base: str, victim: Running) -> tuple[list[Any], list[Any], int, float]:
    """WAITERS clients wait (until idle, on an agent that never is); once every wait has reported progress,
    `victim` gets SIGTERM. A wait cut with `unavailable` is called again once, as its hint says."""
    started = [asyncio.Event() for _ in range(WAITERS)]

    async def waiter(n: int) -> tuple[object, object]:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started[n].set()

        async with http_tools(base + "/mcp", TOKEN) as client:
            tools = Tools(client)
            arguments: dict[str, Any] = {"agent_names": ["busy"], "until": ["idle"], "timeout_s": 4}
            try:
                first = await tools("wait_for_agents", progress=on_progress, **arguments)
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
