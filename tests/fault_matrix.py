"""The fault matrix: every tool × every fault the emulator can inject, over a real loopback socket.

The matrix is data: one row per fault (what is injected, and how), one column
per tool, each cell the outcome the contract promises. Reads ride out bounded
bursts (the client retries safe requests within its budget); persistent faults
and failed writes answer the contract's envelope with the right `error`;
agent-state faults behind the app proxy show as `offline` in `show_agent` and
as `bad_request` for the tools that need a live agent.

Every case (`run_case`) also checks: no "unexpected problem" envelope (an
exception the server did not foresee), and the session token in no tool answer,
no log record (fleet_mcp, fastmcp, httpx, httpcore at DEBUG) and nothing written
to stdout or stderr. The matrix has a column for every tool (checked at import).

The rows are run by three test files, a group each (`ROWS`: Coder's API, writes
and tokens, the app proxy and the agent), so xdist runs them side by side; each
file's `rig` is one emulator on a socket, reset in-process between cases, and
one fleet server per settings profile (small timeouts, a bigger retry budget
for the bounded bursts, a closed port), built once. Each case opens its own
client session, which runs the server's lifespan afresh: no cache or background
task of one case reaches the next, so every case passes alone, in any order,
and on any xdist worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fastmcp import Client, FastMCP

from fleet_mcp.coder import exchange as coder_exchange
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.emulator.coder.errors import ErrorAnswer
from fleet_mcp.emulator.coder.state import Workspace
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.processes import free_port
from tests.support import TOOLS as ALL_TOOLS
from tests.support import CheckedTransport, Tools, fleet_settings

SECRET = "tok-SECRET-7f3a9c1e5b2d4680"
UNEXPECTED = "unexpected problem"
LOGGERS = ("fleet_mcp", "fastmcp", "httpx", "httpcore", "mcp")

# --- the agents every case starts from ------------------------------------------

AGENTS = {"idler": "Warm up [[finish:1]]", "runner": "Spin forever [[hang]]"}

# Columns: each tool with the arguments it is called with.
TOOLS: dict[str, dict[str, Any]] = {
    "create_agent": {"name": "fresh", "project": "fleet-demo", "spec": "New work [[finish:1]]"},
    "list_agents": {},
    "show_agent": {"agent_name": "runner"},
    "show_agent_task_history": {"agent_name": "idler"},
    "show_agent_log": {"agent_name": "idler"},
    "delete_agent": {"agent_name": "idler"},
    "start_agent_task": {"agent_name": "idler", "task_description": "Next step [[finish:1]]"},
    "cancel_agent_task": {"agent_name": "runner"},
    "list_agent_roles": {"project": "fleet-demo"},
    "list_agent_projects": {},
    "stop_agent": {"agent_name": "idler"},
    "start_agent": {"agent_name": "idler"},  # running: answered as it is, unless a fault stopped it
    "answer_agent": {"agent_name": "idler", "prompt_id": "p-x", "decision": "allow"},  # idle: it waits on no answer
    "get_agent_result": {"agent_name": "idler"},
    "wait_for_agents": {"agent_names": ["idler"], "timeout_s": 0},
    "show_agents": {"agent_names": ["idler", "runner"]},
    "show_agent_diff": {"agent_name": "idler"},  # an AgentAPI agent: the diff needs the runner
}
READ_ONLY = {"list_agents", "show_agent", "show_agent_task_history", "show_agent_log", "list_agent_roles",
             "list_agent_projects", "get_agent_result", "wait_for_agents", "show_agents", "show_agent_diff"}
# The tools that send a write in a healthy case (answer_agent and start_agent have nothing to do here).
WRITING = {"create_agent", "delete_agent", "start_agent_task", "cancel_agent_task", "stop_agent"}

# Outcomes: "ok" (a valid answer); for show_agent the agent's status ("busy", "offline", "stopped");
# or the envelope's error: bad = bad_request, nf = not_found, unav = unavailable, unauth = unauthorized,
# conf = conflict (answer_agent to an idle agent: the prompt it names is not pending).
ERRORS = {"bad": "bad_request", "nf": "not_found", "unav": "unavailable", "unauth": "unauthorized",
          "conf": "conflict"}


@dataclass(frozen=True)
class Fault:
    """What is done to Coder before the call: fault rules, a state change, a settings profile."""

    rules: tuple[dict[str, Any], ...] = ()
    state: str = ""  # stop | agentapi_down | agentapi_down_unnoticed | no_path_apps | delete_when_held
    # main (small budget: persistent faults end fast) | burst (a budget bounded bursts clear well within, however
    # loaded the machine) | patient (a budget that fits Coder's Retry-After) | stalled (a short timeout: a
    # persistent stall ends fast) | slow (a short timeout, a long budget: one stall is cut and retried) | refused
    # (nothing listens)
    profile: str = "main"


def rule(match: str, kind: str, **params: object) -> dict[str, Any]:
    return {"match": match, "kind": kind, **params}


def status(match: str, code: int, count: int | None = None, **params: object) -> dict[str, Any]:
    return rule(match, "status", code=code, **({"count": count} if count else {}), **params)


API, PROXY, API_ANY, PROXY_ANY, WRITES = "GET /api/*", "GET /@*", "* /api/*", "* /@*", "POST *"

# For start_agent, like show_agent, "ok" is the idler's usual status (idle) and a status word another one.
#       create  list  show    history log    delete start-task cancel roles projects
#       stop    start answer  result  wait   glance diff
ALL_OK = ("ok", "ok", "busy", "ok", "ok", "ok", "ok", "ok", "ok", "ok",
          "ok", "ok", "conf", "ok", "ok", "ok", "bad")
ALL_UNAV = ("unav",) * 17
ALL_UNAUTH = ("unauth",) * 17
OFFLINE = ("ok", "ok", "offline", "ok", "bad", "ok", "bad", "bad", "ok", "ok",
           "ok", "offline", "bad", "bad", "ok", "ok", "bad")
# show_agents answers each agent's failure in its entry (issue 30.3), where show_agent fails whole.
PROXY_DOWN = ("ok", "ok", "unav", "ok", "unav", "ok", "unav", "unav", "ok", "ok",
              "ok", "unav", "unav", "unav", "ok", "ok", "bad")
WRITE_FAILS = ("unav", "ok", "busy", "ok", "ok", "unav", "unav", "unav", "ok", "ok",
               "unav", "ok", "conf", "ok", "ok", "ok", "bad")
WRITE_502 = ("unav", "ok", "busy", "ok", "ok", "unav", "bad", "bad", "ok", "ok",  # 502 on the proxy: offline
             "unav", "ok", "conf", "ok", "ok", "ok", "bad")
# The write happened and its answer was lost: every tool looks, finds it done and says so (issue 17).
WRITE_LANDED = ALL_OK

MATRIX: dict[str, tuple[Fault, tuple[str, ...]]] = {
    # Bounded bursts on Coder's API: reads retry, so every tool succeeds.
    **{f"api-{code}x2": (Fault((status(API, code, 2),), profile="burst"), ALL_OK) for code in (500, 502, 503, 504)},
    # Coder's Retry-After (1 s) is waited out: a budget that fits it (a shorter one gives up, as it must).
    "api-429-retry-after": (Fault((status(API, 429, 1, retry_after=1),), profile="patient"), ALL_OK),
    "api-drop-x2": (Fault((rule(API, "drop", count=2),), profile="burst"), ALL_OK),
    "api-truncate-x2": (Fault((rule(API, "truncate", count=2),), profile="burst"), ALL_OK),
    "api-garbage-x2": (Fault((rule(API, "garbage", count=2),), profile="burst"), ALL_OK),
    "api-stall-x1": (Fault((rule(API, "stall", count=1),), profile="slow"), ALL_OK),
    "api-latency": (Fault((rule(API_ANY, "latency", seconds=0.02),)), ALL_OK),
    # Bounded bursts on AgentAPI through the app proxy: retried too, except 502 (the app is unreachable) and a
    # complete answer that is not JSON (the app's own, not Coder down: the agent is offline at once, issue 30.3).
    **{f"proxy-{code}x2": (Fault((status(PROXY, code, 2),), profile="burst"), ALL_OK) for code in (500, 503, 504)},
    "proxy-502x2": (Fault((status(PROXY, 502, 2),)), OFFLINE),
    "proxy-drop-x2": (Fault((rule(PROXY, "drop", count=2),), profile="burst"), ALL_OK),
    "proxy-truncate-x2": (Fault((rule(PROXY, "truncate", count=2),)), OFFLINE),
    "proxy-garbage-x2": (Fault((rule(PROXY, "garbage", count=2),)), OFFLINE),
    # Coder down for good: unavailable everywhere once the retry budget is spent.
    **{f"api-{code}-persistent": (Fault((status(API_ANY, code),)), ALL_UNAV) for code in (500, 502, 503, 504, 429)},
    "api-drop-persistent": (Fault((rule(API_ANY, "drop"),)), ALL_UNAV),
    "api-truncate-persistent": (Fault((rule(API_ANY, "truncate"),)), ALL_UNAV),
    "api-garbage-persistent": (Fault((rule(API_ANY, "garbage"),)), ALL_UNAV),
    "api-stall-persistent": (Fault((rule(API_ANY, "stall"),), profile="stalled"), ALL_UNAV),
    "connection-refused": (Fault(profile="refused"), ALL_UNAV),
    # AgentAPI failing for good: the tools that need it say unavailable, the rest never ask it.
    **{f"proxy-{code}-persistent": (Fault((status(PROXY_ANY, code),)), PROXY_DOWN) for code in (500, 503, 504)},
    "proxy-drop-persistent": (Fault((rule(PROXY_ANY, "drop"),)), PROXY_DOWN),
    "proxy-truncate-persistent": (Fault((rule(PROXY_ANY, "truncate"),)), OFFLINE),
    "proxy-garbage-persistent": (Fault((rule(PROXY_ANY, "garbage"),)), OFFLINE),
    "proxy-stall-persistent": (Fault((rule(PROXY_ANY, "stall"),), profile="stalled"), PROXY_DOWN),
    # One failed write: never repeated, answered at once; reads send no write at all.
    **{f"write-{code}": (Fault((status(WRITES, code, 1),)), WRITE_FAILS) for code in (500, 503, 504, 429)},
    "write-502": (Fault((status(WRITES, 502, 1),)), WRITE_502),
    "write-drop": (Fault((rule(WRITES, "drop", count=1),)), WRITE_FAILS),
    "write-truncate": (Fault((rule(WRITES, "truncate", count=1),)), WRITE_LANDED),
    "write-garbage": (Fault((rule(WRITES, "garbage", count=1),)), WRITE_FAILS),
    "write-stall": (Fault((rule(WRITES, "stall", count=1),), profile="stalled"), WRITE_FAILS),
    # The app proxy's own failures (HTML pages and redirects).
    "proxy-303-login": (Fault((rule(PROXY_ANY, "token_expiry", token=SECRET),)),
                        ("ok", "ok", "unauth", "ok", "unauth", "ok", "unauth", "unauth", "ok", "ok",
                         "ok", "unauth", "unauth", "unauth", "ok", "ok", "bad")),
    "workspace-stopped": (Fault(state="stop"), ("ok", "ok", "stopped", "ok", "bad", "ok", "bad", "bad", "ok", "ok",
                                                "ok", "starting", "bad", "bad", "ok", "ok", "bad")),
    "proxy-400-workspace-offline": (Fault((status(PROXY_ANY, 400, message="Workspace Offline"),)), OFFLINE),
    "agentapi-down": (Fault(state="agentapi_down"), OFFLINE),
    "agentapi-down-502": (Fault(state="agentapi_down_unnoticed"), OFFLINE),
    "proxy-404-app-unavailable": (Fault((status(PROXY_ANY, 404, message="Application Unavailable"),)), OFFLINE),
    "proxy-404-app-not-found": (Fault((status(PROXY_ANY, 404, message="Application Not Found"),)), OFFLINE),
    "proxy-403-path-apps-disabled": (Fault(state="no_path_apps"), PROXY_DOWN),
    # The token refused: from the start, or after one request went through.
    "token-expired": (Fault((rule(API_ANY, "token_expiry", token=SECRET),)), ALL_UNAUTH),
    "token-expired-mid-run": (Fault((rule(API_ANY, "token_expiry", token=SECRET, after=1),)),
                              ("unauth", "ok") + ("unauth",) * 12 + ("ok", "ok", "unauth")),
    # The workspace deleted under the call: 410 on reads after the name lookup ...
    "gone-410": (Fault((status("GET /api/v2/workspacebuilds/*", 410),)),
                 ("ok", "ok", "nf", "nf", "nf", "nf", "nf", "nf", "ok", "ok",
                  "nf", "nf", "nf", "nf", "ok", "ok", "nf")),
    # ... or really deleted while a read by id is on its way (cancel re-reads the workspace).
    "deleted-mid-call": (Fault((rule("GET /api/v2/workspaces/*", "latency", seconds=0.1, count=1),),
                               state="delete_when_held"), ALL_OK[:7] + ("nf",) + ALL_OK[8:]),
}
assert set(TOOLS) == ALL_TOOLS, "the matrix has a column for every tool"
assert all(len(row) == len(TOOLS) for _, row in MATRIX.values())


def _group(fault: str) -> str:
    if fault.startswith(("write-", "token-", "gone-", "deleted-")):
        return "writes"
    return "coder" if fault.startswith(("api-", "connection-")) else "proxy"


ROWS: dict[str, list[str]] = {"coder": [], "writes": [], "proxy": []}
for _fault in MATRIX:
    ROWS[_group(_fault)].append(_fault)


def cases(group: str) -> dict[str, Any]:
    """`pytest.mark.parametrize` arguments for every tool under each of the group's faults."""
    pairs = [(fault, tool) for fault in ROWS[group] for tool in TOOLS]
    return {"argnames": ("fault", "tool"), "argvalues": pairs, "ids": [f"{f}-{t}" for f, t in pairs]}


# --- the rig: one emulator on a socket, one fleet server per settings profile ------------

@dataclass
class Rig:
    emulator: Emulator
    servers: dict[str, FastMCP]

    @asynccontextmanager
    async def tools(self, profile: str) -> AsyncIterator[Tools]:
        """A client session of the profile's server: its lifespan, so its Coder client and caches, are new."""
        async with Client(self.servers[profile]) as client:
            yield Tools(client)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    conformance: Conformance = request.config.stash[Conformance.KEY]
    emulator = Emulator(token=SECRET)
    # Backoff scaled down so bursts clear in milliseconds; the logic under test is unchanged.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(coder_exchange, "_BACKOFF_FIRST_S", 0.01)
        mp.setattr(coder_exchange, "_JITTER_S", 0.005)
        async with running(emulator) as url:
            # Timeouts that a call which should succeed never meets, however loaded the machine (issue 32.9);
            # only the stall rows' profiles time out on purpose, and their stalls last far longer than the timeout.
            common = {"coder_session_token": SECRET, "connect_timeout_s": 10.0, "poll_interval_s": 0.01,
                      "cancel_wait_s": 1.0, "delete_wait_s": 1.0, "agent_error_wait_s": 0.1}
            profiles = {
                "main": fleet_settings(coder_url=url, request_timeout_s=10.0, retry_budget_s=0.1, **common),
                "burst": fleet_settings(coder_url=url, request_timeout_s=10.0, retry_budget_s=10.0, **common),
                "patient": fleet_settings(coder_url=url, request_timeout_s=10.0, retry_budget_s=5.0, **common),
                "stalled": fleet_settings(coder_url=url, request_timeout_s=0.3, retry_budget_s=0.1, **common),
                "slow": fleet_settings(coder_url=url, request_timeout_s=0.5, retry_budget_s=10.0, **common),
                "refused": fleet_settings(coder_url=f"http://127.0.0.1:{free_port()}", request_timeout_s=0.3,
                                          retry_budget_s=0.1, **common),
            }
            transport = CheckedTransport(httpx.AsyncHTTPTransport(), conformance)  # its aclose keeps the pool
            yield Rig(emulator, {name: build_server(s, transport=transport) for name, s in profiles.items()})


def prepare(emulator: Emulator) -> None:
    """Reset to the demo seed (faults and counts cleared), then an idle and a busy fleet agent."""
    b = emulator.backend
    emulator.control.reset()
    b.disable_path_apps, b.wildcard_hostname, b.rate_limit, b.time_per_request = False, "", False, 0.0
    demo = next(u for u in b.users.values() if u.username == "demo")
    template = next(t for t in b.templates.values() if t.name == "fleet-demo")
    for name, spec in AGENTS.items():
        b.create_workspace(demo, "me", {"name": name, "template_id": template.id, "rich_parameter_values": [
            {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_project", "value": "fleet-demo"},
            {"name": "fleet_mcp_agent_spec", "value": spec}, {"name": "fleet_mcp_current_task", "value": spec}]})
    b.clock.advance(30)
    b.time_per_request = 0.5  # polls (cancel's wait for `stable`) see time move


def agents(emulator: Emulator) -> list[Workspace]:
    b = emulator.backend
    return [w for w in b.workspaces.values() if w.name in AGENTS and not w.deleted]


def apply_state(emulator: Emulator, state: str) -> None:
    b = emulator.backend
    demo = next(u for u in b.users.values() if u.username == "demo")
    if state == "stop":
        for ws in agents(emulator):
            b.create_build(demo, ws.id, {"transition": "stop"})
        b.clock.advance(30)
    elif state in ("agentapi_down", "agentapi_down_unnoticed"):
        for ws in agents(emulator):
            emulator.claude.set_process(ws, False)
            if state == "agentapi_down_unnoticed":  # the health check has not noticed yet: the proxy says 502
                for agent in ws.latest_build.agents:
                    for app in agent.apps:
                        app.health = "healthy"
    elif state == "no_path_apps":
        b.disable_path_apps = True
    elif state not in ("", "delete_when_held"):
        raise AssertionError(f"unknown state {state!r}")


def delete_agents(emulator: Emulator) -> None:
    b = emulator.backend
    demo = next(u for u in b.users.values() if u.username == "demo")
    for ws in agents(emulator):
        with contextlib.suppress(ErrorAnswer):  # as Coder, the emulator refuses while a build (the call's) is active
            b.create_build(demo, ws.id, {"transition": "delete"})
    b.clock.advance(30)


def check(tool: str, expected: str, answer: dict[str, Any]) -> None:
    is_error = isinstance(answer, dict) and set(answer) == {"error", "message", "details"}
    if expected in ERRORS:
        assert is_error, f"expected {ERRORS[expected]}, got {answer}"
        assert answer["error"] == ERRORS[expected], answer
        assert isinstance(answer["message"], str) and answer["message"], answer
        return
    assert not is_error, f"expected success, got {answer}"
    if tool == "show_agent":
        assert answer["agent"]["status"] == (expected if expected != "ok" else "busy"), answer["agent"]
    elif tool == "create_agent":
        assert answer["agent"]["name"] == "fresh"
    elif tool == "delete_agent":
        assert answer["deleted_agent"]["name"] == "idler"
    elif tool == "start_agent_task":
        assert answer["agent_status"] == "busy"
    elif tool == "cancel_agent_task":
        assert answer["task"]["message"].endswith(" - canceled")
    elif tool == "list_agents":
        assert {a["name"] for a in answer["agents"]} == set(AGENTS), answer
    elif tool == "show_agent_task_history":
        assert answer["tasks"] and answer["total_count"] >= len(answer["tasks"]), answer
    elif tool == "show_agent_log":
        assert answer["messages"], answer
    elif tool == "list_agent_projects":
        assert "fleet-demo" in [p["name"] for p in answer["projects"]]
    elif tool == "list_agent_roles":
        assert {r["name"] for r in answer["roles"]} == {"coder", "operator", "manager"}
    elif tool == "stop_agent":
        assert answer["agent"]["name"] == "idler" and answer["agent"]["status"] in ("stopping", "stopped"), answer
    elif tool == "start_agent":
        assert answer["agent"]["status"] == (expected if expected != "ok" else "idle"), answer["agent"]
    elif tool == "get_agent_result":
        assert answer["agent_name"] == "idler" and answer["outcome"] == "succeeded", answer
    elif tool == "wait_for_agents":
        assert [a["name"] for a in answer["agents"]] == ["idler"], answer
    elif tool == "show_agents":
        assert [a["name"] for a in answer["agents"]] == ["idler", "runner"], answer


def watch_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[logging.Handler, int]]:
    """Every record of LOGGERS at DEBUG into caplog; answers the console handlers to restore.

    fastmcp's logger does not propagate to the root logger, so caplog's handler joins it
    directly; its own Rich console handlers stay at INFO (rendering every DEBUG line costs
    more than the whole matrix), so stderr still shows what a user would see.
    """
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    fastmcp_logger = logging.getLogger("fastmcp")
    quiet = [(h, h.level) for h in fastmcp_logger.handlers if h is not caplog.handler]
    for handler, _ in quiet:
        handler.setLevel(max(handler.level, logging.INFO))
    if caplog.handler not in fastmcp_logger.handlers:
        fastmcp_logger.addHandler(caplog.handler)
    return quiet


async def run_case(rig: Rig, fault: str, tool: str, caplog: pytest.LogCaptureFixture,
                   capfd: pytest.CaptureFixture[str]) -> None:
    """One cell: `tool` called under `fault`, its answer the row's promise, nothing leaked or unforeseen."""
    spec, row = MATRIX[fault]
    expected = row[list(TOOLS).index(tool)]
    quiet = watch_logs(caplog)
    try:
        emulator = rig.emulator
        prepare(emulator)
        rules = [emulator.control.faults.add(r) for r in spec.rules]
        apply_state(emulator, spec.state)
        async with rig.tools(spec.profile) as tools:
            call = asyncio.ensure_future(tools(tool, **TOOLS[tool]))
            if spec.state == "delete_when_held":
                while not call.done() and not rules[0].fired:
                    await asyncio.sleep(0.002)
                if rules[0].fired:
                    delete_agents(emulator)
            answer = await call
        assert UNEXPECTED not in json.dumps(answer), answer
        check(tool, expected, answer)

        b = emulator.backend
        if tool in READ_ONLY:  # a read never writes, whatever happens on the wire
            writes = {route: n for route, n in b.requests.items() if not route.startswith("GET ")}
            assert not writes, writes
            assert all(r.fired == 0 for r in rules if r.method == "POST"), [r.json() for r in rules]
        if tool == "create_agent":
            made = [w for w in b.workspaces.values() if w.name == "fresh" and not w.deleted]
            assert len(made) == (1 if expected == "ok" else 0), "create made nothing twice, nothing on failure"
        if fault.startswith("write-") and tool in WRITING:
            assert [r.fired for r in rules] == [1], "a write is sent exactly once, never retried"
    finally:
        logging.getLogger("fastmcp").removeHandler(caplog.handler)
        for handler, level in quiet:
            handler.setLevel(level)
    out, err = capfd.readouterr()
    for where, text in [("answer", json.dumps(answer)), ("logs", caplog.text), ("stdout", out), ("stderr", err)]:
        assert SECRET not in text, f"the token leaked into {where}"
    unforeseen = [r.getMessage() for r in caplog.records if r.name.startswith("fleet_mcp")
                  and r.getMessage().startswith("unexpected")]
    assert not unforeseen, unforeseen
