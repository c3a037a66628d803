"""The agent's side of the wire, fuzzed (issue 30.6): whatever a runner or AgentAPI answers, each driver call and
each tool ends in a value or that agent's clear problem, within bounded time and memory.

The agent is untrusted (it can replace the program on its app's port), so its answers are generated here:
JSON in the routes' own shapes with hostile values (deep nesting, huge and odd numbers, lone surrogates,
control characters, huge counts, wrong types, times out of range), arbitrary JSON, and bytes that are not JSON.
The drivers meet them over an httpx MockTransport standing in for the agent's side (Coder is not in the way:
its proxy passes an app's answer through): every call meets each known-hostile answer on each route (the
other routes answering sanely, so the call gets that far), then Hypothesis's. The tools meet generated
answers through the emulator's app proxy, whose fault rules stand in for the agent's program. A "clear problem" is a `DriverError` or a `CoderError` from the
driver, and from a tool an answer or an error envelope that is never "unexpected problem".
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_mcp import runner_wire as wire
from fleet_mcp.coder import errors as ce
from fleet_mcp.coder.answers import values_over
from fleet_mcp.coder.apps import App
from fleet_mcp.coder.client import CoderClient
from fleet_mcp.drivers import AgentAPIDriver, DriverError, RunnerDriver
from tests.support import TOKEN, Tools, fleet_settings, runner_agent

CALL_S = 20.0  # a hang, not a slow machine: every call here takes milliseconds
UNEXPECTED = "unexpected problem"
RUNS = {"driver": 0, "tool": 0, "count": 0}  # examples run, reported at the end of the module

# --- what an agent may answer ---------------------------------------------------------------------------------

ODD_TIMES = st.sampled_from(["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "0000-00-00T00:00:00Z",
                             "2026-13-45T25:61:61Z", "yesterday", "", "2026-11-26T12:00:00.123456789123Z",
                             "-999999999-01-01T00:00:00Z"])
ODD_NUMBERS = st.sampled_from(["1e400", "-1e400", "1" + "0" * 5000, "-0", "1.5e-400", "18446744073709551616",
                               "-9223372036854775809", "0.1e1", "3.14"])
ODD_TEXT = st.one_of(
    st.text(),  # any code point, control characters included
    st.just("\\ud800"), st.just("\\udfff x \\ud83d"),  # lone surrogates, as JSON escapes them
    st.just("\\u0000\\u001b[31m\\r\\n"),
    st.builds(lambda n: "\\u0001" * n, st.integers(0, 50_000)),
)


def raw_string(text: str) -> str:
    """A JSON string literal whose content may hold escapes already written (`\\ud800`)."""
    if "\\u" in text and all(c.isascii() for c in text):
        return '"' + text + '"'
    return json.dumps(text)


def value() -> st.SearchStrategy[str]:
    """One hostile JSON value, as text."""
    leaf = st.one_of(st.just("null"), st.just("true"), st.just("false"), ODD_NUMBERS,
                     st.integers().map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
                     ODD_TIMES.map(json.dumps), ODD_TEXT.map(raw_string))
    nested = st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(st.text(max_size=8), inner, max_size=4).map(
            lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")), max_leaves=12)
    return st.one_of(nested, st.builds(lambda n: "[" * n + "]" * n, st.integers(1, 20_000)),  # deep
                     st.builds(lambda n: "[" + ",".join(["{}"] * n) + "]", st.integers(0, 150_000)))  # counts


def shaped(fields: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[str]:
    """An object with some of a route's own fields (each a hostile value, or one made for it) and others."""
    own = {name: st.one_of(made, value()) for name, made in fields.items()}
    return st.fixed_dictionaries({}, optional={**own, "extra": value()}).map(
        lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")


def entries(model: type[wire.Answer]) -> st.SearchStrategy[str]:
    return shaped({name: value() for name in model.model_fields})


def listed(key: str, item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """`{key: [item, ...]}`."""
    return st.lists(item, max_size=5).map(lambda xs: f'{{"{key}":[' + ",".join(xs) + "]}")


# Whole answers known to hurt a parser: nesting past any recursion limit, counts past any list's bound, a
# number past any float, lone surrogates, control characters, wrong types at the top.
HOSTILE_BODIES = [
    "[" * 5_000 + "]" * 5_000, '{"a":' * 3_000 + "1" + "}" * 3_000, "[" * 200_000,
    "[" + ",".join(["{}"] * 120_000) + "]", '{"messages":[' + ",".join(['{"id":1}'] * 20_000) + "]}",
    '{"state":"idle","answered":[' + ",".join(["{}"] * 60_000) + "]}",
    "1" + "0" * 5_000, "1e999", "NaN", '"\\ud800"', '"\\u0000\\u001b"', "[]", "null", '"text"', "true", "",
    "<html>502</html>", '{"state": "idle"', '{"state":"idle","since":"9999-12-31T23:59:59-14:00"}',
]
HOSTILE = st.sampled_from(HOSTILE_BODIES)


def body_of(good: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """What the agent answers a route: its shape with hostile values, a known-hostile answer, any JSON, or not
    JSON at all."""
    return st.one_of(good, HOSTILE, value(), st.sampled_from(["<html>502</html>", '{"state": "idle"', ""]),
                     st.binary(max_size=64).map(lambda b: b.decode("latin-1"))).map(
        lambda s: s.encode("utf-8", "surrogatepass"))


STATE = shaped({"state": st.sampled_from(['"idle"', '"working"', '"needs_input"', '"x"']),
                "pending": entries(wire.Pending), "answered": listed("x", entries(wire.Answered)).map(
                    lambda s: s[5:-1])})
RUNNER: dict[str, st.SearchStrategy[bytes]] = {
    "state": body_of(STATE),
    "messages": body_of(listed("messages", entries(wire.Message))),
    "message": body_of(shaped({"queued": value(), "state": STATE})),
    "interrupt": body_of(shaped({"state": STATE})),
    "answer": body_of(shaped({"state": STATE})),
    "result": body_of(shaped({"result": shaped({"changes": shaped({
        "files": listed("x", entries(wire.ChangedFile)).map(lambda s: s[5:-1]),
        "commits": listed("x", entries(wire.Commit)).map(lambda s: s[5:-1])}), "structured": value()})})),
    "diff": body_of(shaped({"files": listed("x", entries(wire.DiffFile)).map(lambda s: s[5:-1]),
                            "pages": value()})),
}
HEALTHY_STATE = {"state": "needs_input", "pending": {"id": "p-1", "tool": "Bash", "summary": "ls"}, "turns": 1}
HEALTHY = {  # what every route but the fuzzed one answers, so that a call gets as far as the fuzzed one
    "runner": {"state": HEALTHY_STATE, "messages": {"messages": []}, "message": {"queued": True},
               "interrupt": {"state": HEALTHY_STATE}, "answer": {"state": HEALTHY_STATE},
               "result": {"result": {"task": "Go"}}, "diff": {"files": []}},
    "agentapi": {"status": {"status": "stable"}, "messages": {"messages": []}, "message": {"ok": True}},
}
AGENTAPI_MESSAGE = shaped({"id": value(), "role": value(), "content": value(), "time": ODD_TIMES.map(json.dumps)})
AGENTAPI: dict[str, st.SearchStrategy[bytes]] = {
    "status": body_of(shaped({"status": st.sampled_from(['"running"', '"stable"']), "transport": value()})),
    "messages": body_of(listed("messages", AGENTAPI_MESSAGE)),
    "message": body_of(shaped({"ok": value()})),
    "events": st.lists(st.tuples(st.sampled_from(["agent_error", "status_change", "message_update", "x"]),
                                 value()), max_size=4).map(
        lambda evs: "".join(f"event: {e}\ndata: {d}\n\n" for e, d in evs).encode("utf-8", "surrogatepass")),
}


# --- the count the fleet makes before it parses ---------------------------------------------------------------

def count(v: Any) -> int:
    """Commas and brackets outside strings in `json.dumps(v)`: what `values_over` bounds."""
    if isinstance(v, list):
        return 1 + max(0, len(v) - 1) + sum(count(x) for x in v)
    if isinstance(v, dict):
        return 1 + max(0, len(v) - 1) + sum(count(x) for x in v.values())
    return 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('a",[]{}\\:\n')),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner,
                                                                                max_size=6), max_leaves=40)


@settings(max_examples=100, deadline=None)
@given(JSON, st.integers(0, 40), st.booleans())
def test_the_count_before_parsing_is_exact(v, cap, ascii_only):
    RUNS["count"] += 1
    assert values_over(json.dumps(v, ensure_ascii=ascii_only).encode(), cap) is (count(v) > cap)


# --- the drivers --------------------------------------------------------------------------------------------

ROUTE = re.compile(r"/apps/(?P<slug>\w+)/(?P<route>\w+)")


class Agent:
    """The agent's side: each route answers what the example gave it (a 200 `application/json`)."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        route = ROUTE.search(request.url.path)
        body = self.bodies.get(route["route"] if route else "", b"")
        kind = "text/event-stream" if route and route["route"] == "events" else "application/json"
        return httpx.Response(200, headers={"content-type": kind}, content=body)


def driver_calls(runner: RunnerDriver, agentapi: AgentAPIDriver) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every driver method, each reading the routes it reads."""
    return {
        "runner.live": lambda: runner.live(deadline=None),
        "runner.conversation": lambda: runner.conversation(deadline=None),
        "runner.send": lambda: runner.send("Go", "queue", {"type": "object"}, deadline=None),
        "runner.interrupt": lambda: runner.interrupt(deadline=None),
        "runner.answer": lambda: runner.answer("allow", "", "p-1", deadline=None),
        "runner.reported_errors": lambda: runner.reported_errors(0.5, deadline=None),
        "runner.last_result": lambda: runner.last_result(deadline=None),
        "runner.diff": lambda: runner.diff("task", None, "patch", 1, 20, deadline=None),
        "agentapi.live": lambda: agentapi.live(deadline=None),
        "agentapi.conversation": lambda: agentapi.conversation(deadline=None),
        "agentapi.send": lambda: agentapi.send("Go", "reject", deadline=None),
        "agentapi.interrupt": lambda: agentapi.interrupt(deadline=None),
        "agentapi.answer": lambda: agentapi.answer("allow", "fine", "screen-1", deadline=None),
        "agentapi.reported_errors": lambda: agentapi.reported_errors(0.5, deadline=None),
    }


def peak_reset() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak RSS (VmHWM) starts again from now


def rss_mb(field: str) -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024


class Rig:
    """Both drivers of one workspace, over the stand-in agent, on a loop of their own."""

    def __init__(self) -> None:
        self.agent = Agent()
        self.loop = asyncio.new_event_loop()
        self.client = CoderClient("http://coder.test", TOKEN, transport=httpx.MockTransport(self.agent),
                                  retry_budget_s=0.0, request_timeout_s=CALL_S)
        self.calls = driver_calls(RunnerDriver(self.client, App("demo", "fuzzed", "main", "fleet"), key="k" * 43),
                                  AgentAPIDriver(self.client, App("demo", "fuzzed", "main", "ccw")))

    def call(self, name: str, fuzzed: str, body: bytes) -> None:
        """`name` with route `fuzzed` answering `body` and the others sanely: a value or the agent's problem."""
        kind = name.split(".")[0]
        self.agent.bodies = {route: json.dumps(sane).encode() for route, sane in HEALTHY[kind].items()}
        self.agent.bodies[fuzzed] = body

        async def call() -> None:
            async with asyncio.timeout(CALL_S):
                try:
                    await self.calls[name]()
                except (DriverError, ce.CoderError):
                    pass  # the agent's problem, said

        self.loop.run_until_complete(call())
        RUNS["driver"] += 1

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def rig():
    made = Rig()
    yield made
    made.close()


NAMES = driver_calls(cast(RunnerDriver, None), cast(AgentAPIDriver, None))  # the calls' names; none is made


def routes_of(name: str) -> dict[str, st.SearchStrategy[bytes]]:
    return RUNNER if name.startswith("runner.") else AGENTAPI


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_driver_call_on_every_hostile_answer_is_a_value_or_the_agents_problem(rig, name):
    before = rss_mb("VmRSS")
    peak_reset()
    for route in routes_of(name):
        for body in HOSTILE_BODIES:
            rig.call(name, route, body.encode("utf-8", "surrogatepass"))
    grown = rss_mb("VmHWM") - before
    assert grown < 300, f"{name}: the hostile answers took {grown:.0f} MB at their peak"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(NAMES)), data=st.data())
def test_every_driver_call_on_any_answer_is_a_value_or_the_agents_problem(rig, name, data):
    routes = routes_of(name)
    fuzzed = data.draw(st.sampled_from(sorted(routes)), label="route")  # one route hostile, the rest sane
    rig.call(name, fuzzed, data.draw(routes[fuzzed], label=fuzzed))


# --- the tools ---------------------------------------------------------------------------------------------

TOOLS: list[tuple[str, dict[str, Any]]] = [("show_agents", {"agent_names": ["fuzzed", "calm"]}), ("show_agent", {"agent_name": "fuzzed"}),
         ("get_agent_result", {"agent_name": "fuzzed"}), ("show_agent_diff", {"agent_name": "fuzzed"}),
         ("show_agent_log", {"agent_name": "fuzzed"}), ("wait_for_agents", {"agent_names": ["fuzzed"],
                                                                            "timeout_s": 0}),
         ("cancel_agent_task", {"agent_name": "fuzzed"}), ("answer_agent", {"agent_name": "fuzzed",
                                                                             "prompt_id": "p-1",
                                                                             "decision": "allow"}),
         ("start_agent_task", {"agent_name": "fuzzed", "task_description": "Go", "if_busy": "queue"})]


def test_every_tool_on_any_runner_answer_is_a_value_or_the_agents_problem(emulator, conformance):
    from fastmcp import Client

    from fleet_mcp.server import build_server

    loop = asyncio.new_event_loop()
    settings_ = fleet_settings(retry_budget_s=0.0, cancel_wait_s=0.2)
    transport = httpx.ASGITransport(app=emulator.app)
    coder = httpx.AsyncClient(transport=transport, base_url="http://coder.test",
                              headers={"Coder-Session-Token": TOKEN})
    client = Client(build_server(settings_, transport=transport))
    loop.run_until_complete(runner_agent(coder, emulator, "fuzzed"))
    loop.run_until_complete(runner_agent(coder, emulator, "calm"))
    loop.run_until_complete(client.__aenter__())  # type: ignore[no-untyped-call]  # fastmcp leaves it unannotated
    tools = Tools(client)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.data_too_large])
    @given(st.sampled_from(range(len(TOOLS))), st.data())
    def one(which: int, data: st.DataObject) -> None:
        RUNS["tool"] += 1
        tool, arguments = TOOLS[which]
        emulator.control.faults.clear()
        for route, bodies in RUNNER.items():
            body = data.draw(bodies, label=route).decode("utf-8", "replace")
            emulator.control.faults.add({"match": f"* /@demo/fuzzed.*/apps/fleet/{route}", "kind": "garbage",
                                         "body": body})

        async def call() -> dict[str, Any]:
            async with asyncio.timeout(CALL_S):
                return await tools(tool, **arguments)

        answer = loop.run_until_complete(call())
        said = json.dumps(answer)
        assert UNEXPECTED not in said, said[:2000]
        if "error" in answer and set(answer) == {"error", "message", "details"}:
            assert answer["error"] in ("bad_request", "conflict", "unavailable", "not_found"), said[:2000]

    try:
        one()
    finally:
        loop.run_until_complete(client.__aexit__(None, None, None))  # type: ignore[no-untyped-call]  # as __aenter__
        loop.run_until_complete(coder.aclose())
        loop.close()


@pytest.fixture(scope="module", autouse=True)
def say_how_many_ran():
    yield
    print(f"\nwire fuzz: {RUNS['count']} count cases, {RUNS['driver']} driver calls, {RUNS['tool']} tool calls")
