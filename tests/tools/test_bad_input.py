"""Whatever a caller sends, every tool answers a contract error or a valid success, and
bad input changes nothing in Coder.

Property-based (hypothesis) over every tool's parameters: empty, over the limits and
1 MB strings, control characters, unicode look-alikes and RTL marks, Coder search-query
smuggling (`owner:alice`, `param:fleet_mcp_managed=true`, quotes, `a/b`, case tricks),
negative and huge pages, wrong types, missing and extra fields. After every call the
emulator's workspaces (with their latest build) and AgentAPI conversations are as they
were, and no POST/PATCH/DELETE route was requested. The guard too: other users'
workspaces and workspaces made by hand stay out of reach, whatever the spelling, even
though the token's user is a site owner.

Hypothesis drives a synchronous test; the fleet server, its MCP client and the emulator
(in-process, ASGITransport) live on an event loop in a helper thread for the whole test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar, cast

import httpx
import jsonschema
import pytest
from fastmcp import Client
from fastmcp.client.transports import FastMCPTransport
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fleet_mcp.emulator import Emulator
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.support import TOKEN, TOOLS, CheckedTransport, first_text, fleet_settings

T = TypeVar("T")

ERRORS = {"bad_request", "not_found", "conflict", "unavailable", "unauthorized"}
WORKER = "worker"  # the token user's one fleet agent (idle)
OUTSIDERS = ["hand-made", "dev-box", "alice-agent"]  # by hand (fleet template), plain, another user's agent
PROJECTS = {"fleet-demo", "fleet demo", "fleet-research", "research lab"}  # names and display names, lowercased
ROLES = {"coder", "operator", "manager"}
MAX_TEXT = 65_536
CALLS = {"n": 0}

SETTINGS = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.large_base_example])


# --- the rig ----------------------------------------------------------------------

class Rig:
    """The emulator (demo seed + one idle fleet agent) and the fleet server's MCP client on a loop thread."""

    def __init__(self, conformance: Conformance) -> None:
        self.emulator = Emulator(token=TOKEN)
        b = self.emulator.backend
        demo = next(u for u in b.users.values() if u.username == "demo")
        template = next(t for t in b.templates.values() if t.name == "fleet-demo")
        b.create_workspace(demo, "me", {"name": WORKER, "template_id": template.id, "rich_parameter_values": [
            {"name": "fleet_mcp_managed", "value": "true"}, {"name": "fleet_mcp_project", "value": "fleet-demo"},
            {"name": "fleet_mcp_agent_spec", "value": "Idle about [[finish:1]]"}]})
        b.clock.advance(60)
        b.requests.clear()
        self.conformance = conformance
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fleet-rig", daemon=True)
        self.schemas: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> Rig:
        self.thread.start()
        ready: concurrent.futures.Future[Client[FastMCPTransport]] = concurrent.futures.Future()
        self.main = asyncio.run_coroutine_threadsafe(self._serve(ready), self.loop)
        self.client = ready.result(timeout=30)
        tools = self._run(self.client.list_tools())
        self.schemas = {t.name: t.output_schema for t in tools if t.output_schema is not None}
        assert len(self.schemas) == len(TOOLS)  # every tool has an output schema
        return self

    async def _serve(self, ready: concurrent.futures.Future[Client[FastMCPTransport]]) -> None:
        self.stop = asyncio.Event()
        transport = CheckedTransport(httpx.ASGITransport(app=self.emulator.app), self.conformance)
        async with Client(build_server(fleet_settings(), transport=transport)) as client:
            ready.set_result(client)
            await self.stop.wait()

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.main.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def snapshot(self) -> tuple[object, ...]:
        b = self.emulator.backend
        workspaces = sorted((w.id, w.name, w.owner_id, w.deleted, w.latest_build.id, len(w.builds))
                            for w in b.workspaces.values())
        sessions = sorted((k, len(s.messages), s.status, s.keys) for k, s in cast(dict[str, Any], b.sessions).items())
        return workspaces, sessions, len(b.templates)

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(is_error, envelope or structured content); nothing may change in the emulator."""
        CALLS["n"] += 1
        before = self.snapshot()
        result = self._run(self.client.call_tool(tool, arguments, raise_on_error=False))
        assert self.snapshot() == before, f"{tool} changed the emulator with {short(arguments)}"
        writes = {r: n for r, n in self.emulator.backend.requests.items() if not r.startswith("GET ")}
        if tool == "create_agent" and name_taken(arguments.get("name")):
            # The fleet leaves "is the name taken?" to Coder's own 409 (issue 11): that POST changes nothing.
            writes.pop("POST /api/v2/users/{user}/workspaces", None)
            self.emulator.backend.requests.clear()
        assert not writes, f"{tool} sent {writes} with {short(arguments)}"
        if result.is_error:
            answer = json.loads(first_text(result.content))
            assert set(answer) == {"error", "message", "details"}, answer
            assert answer["error"] in ERRORS, answer
            assert "unexpected problem" not in answer["message"], (tool, short(arguments), answer)
            return True, answer
        answer = result.structured_content
        assert isinstance(answer, dict), result
        jsonschema.validate(answer, self.schemas[tool])
        return False, answer


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    # fastmcp's console handlers would print a warning per refused call: thousands of lines.
    console = [(h, h.level) for h in logging.getLogger("fastmcp").handlers]
    for handler, _ in console:
        handler.setLevel(logging.CRITICAL)
    try:
        with Rig(request.config.stash[Conformance.KEY]) as r:
            yield r
    finally:
        for handler, level in console:
            handler.setLevel(level)


def short(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=True)[:300]


# --- strategies -------------------------------------------------------------------

LOOKALIKE = str.maketrans({"a": "а", "e": "е", "o": "о", "c": "с", "p": "р", "x": "х", "-": "‐"})  # Cyrillic, U+2010
FULLWIDTH = str.maketrans({chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)})

SMUGGLING = [
    "owner:alice", "owner:me", "owner:alice name:alice-agent", "name:alice-agent", 'name:"hand-made"',
    "param:fleet_mcp_managed=true", "fleet_mcp_managed=true", "hand-made param:fleet_mcp_managed=true",
    "alice-agent owner:alice", "owner:demo", "template:fleet-demo", "status:running", "deleted:true",
    "a/b", "alice/alice-agent", "../alice-agent", "..%2Falice-agent", "%2e%2e", "alice%2Falice-agent",
    "@alice", "@me", "me", "new", "create", "*", "%", "?q=owner:alice", "#x", "' OR '1'='1", "\\",
    '"hand-made"', "'dev-box'", "null", "None", "undefined", "true", "0", "-1", "a--b", "-a", "a-", "-",
    "x" * 20, "x" * 21, "y" * 32, "z" * 33, "Fleet-Demo", "FLEET-DEMO ", " research lab", "fleet_demo",
]


def spellings(name: str) -> st.SearchStrategy[str]:
    """`name` as a model might garble it, or an attacker disguise it."""
    cases = st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda flips: "".join(c.upper() if f else c for c, f in zip(name, flips, strict=True)))
    return st.one_of(cases, st.sampled_from([
        name, name.upper(), name.title(), name.swapcase(), f" {name}", f"{name} ", f"{name}\n", f"\t{name}",
        f"{name}\x00", f"\u200b{name}", f"{name}\u200d", f"\u202e{name}", f"\u202e{name[::-1]}\u202c",
        f"\u200f{name}", name.translate(LOOKALIKE), name.translate(FULLWIDTH), name.replace("-", "%2D"),
        name.replace("-", "_"), name.replace("-", ""), name.replace("-", " "), f"me/{name}", f"alice/{name}",
        f"{name}/", f"{name}.main", f"{name}?x=1", f'"{name}"', f"owner:alice {name}", f"name:{name}",
        f"{name} param:fleet_mcp_managed=true", f"owner:me {name}", f"{name}#", f"%40alice/{name}",
    ]))


huge = st.sampled_from([MAX_TEXT + 1, 100_000, 1_000_000]).flatmap(
    lambda n: st.sampled_from(["x", "é", "\x00", " ", "a-", "🙂"]).map(lambda c: (c * n)[:n]))
weird_chars = st.text(st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Mn"]), max_size=12)
any_text = st.one_of(
    st.just(""), st.sampled_from(SMUGGLING), st.text(max_size=40), weird_chars,
    st.text(st.characters(codec="ascii"), max_size=40), st.from_regex(r"[a-zA-Z0-9-]{1,40}", fullmatch=True),
    *(spellings(n) for n in OUTSIDERS), huge)
wrong_type = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=3), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
any_value = st.one_of(any_text, wrong_type)
page_value = st.one_of(
    st.integers(-(10**12), 10**12), st.integers(-(2**80), 2**80), st.sampled_from([0, -1, 1, 2, 100, 101, 10**18]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["1", "two", "", " 3", "1e3", "0x10"]),
    st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
blank = st.text(st.sampled_from(" \t\n\r\x0b\x0c\u3000\u00a0\u2028\u2029\x1c\x1d\x1e\x1f\x85"), max_size=20)


def extra_fields(params: list[str], min_size: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k not in params), any_value,
                           min_size=min_size, max_size=2)


def arguments(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict[str, Any]]:
    """Each field drawn from its strategy or left out; sometimes extra fields."""
    optional = st.fixed_dictionaries({}, optional=fields)
    return st.tuples(optional, st.one_of(st.just({}), extra_fields(list(fields)))).map(lambda p: {**p[1], **p[0]})


def reaches_worker(name: object) -> bool:
    return isinstance(name, str) and name.strip().lower() == WORKER


def name_taken(name: object) -> bool:
    """A well-formed name of an existing workspace of the token user (Coder compares names ignoring case)."""
    return isinstance(name, str) and name.lower() in {WORKER, "hand-made", "dev-box"}


def valid_text(value: object) -> bool:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        return False
    try:
        return len(value.encode("utf-8")) <= MAX_TEXT  # a limit in bytes, as Coder's environment counts
    except UnicodeEncodeError:
        return False


def could_create(args: dict[str, Any]) -> bool:
    """Whether a well-behaved fleet would create a workspace from these arguments (kept out: it is no bad input)."""
    name, project, spec = (args.get(k) for k in ("name", "project", "spec"))
    role = args.get("role", "coder")
    extra = set(args) - {"name", "project", "spec", "role"}
    return (not extra and isinstance(name, str) and isinstance(project, str) and project.strip().lower() in PROJECTS
            and valid_text(spec) and isinstance(role, str) and role in ROLES and 1 <= len(name) <= 20
            and all(part.isascii() and part.isalnum() for part in name.split("-"))
            and name.lower() not in {"new", "create", WORKER, "hand-made", "dev-box"})


# --- the properties -----------------------------------------------------------------

AGENT_TOOLS = ["show_agent", "show_agent_task_history", "show_agent_log", "delete_agent", "start_agent_task",
               "cancel_agent_task"]
agent_name = st.one_of(any_value, st.just(WORKER), spellings(WORKER))


def agent_arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy] = {"agent_name": agent_name}
    good: dict[str, object] = {"agent_name": WORKER}
    if tool in ("show_agent_task_history", "show_agent_log"):
        fields |= {"page": page_value, "page_size": page_value}
        good |= {"page": 1, "page_size": 20}
    if tool == "start_agent_task":
        fields["task_description"] = st.one_of(any_value, blank, st.just("Do it"))
        good["task_description"] = "Do it"
    return st.one_of(
        arguments(fields),  # anything goes
        st.sampled_from(list(fields)).flatmap(  # one bad field, the others good (the agent exists)
            lambda bad: fields[bad].map(lambda value: {**good, bad: value})),
        extra_fields(list(fields), min_size=1).map(lambda extra: {**extra, **good}),  # good ones plus extras
    )


agent_calls = st.sampled_from(AGENT_TOOLS).flatmap(lambda t: st.tuples(st.just(t), agent_arguments(t)))


def test_agent_tools_answer_every_input(rig: Rig) -> None:
    @settings(SETTINGS, max_examples=450)
    @given(agent_calls)
    def run(call: tuple[str, dict[str, Any]]) -> None:
        tool, args = call
        name = args.get("agent_name")
        if tool == "delete_agent":  # with extra fields it must be refused, even for a real agent
            assume(not (reaches_worker(name) and set(args) == {"agent_name"}))
        if tool == "start_agent_task":
            assume(not (reaches_worker(name) and valid_text(args.get("task_description"))
                        and set(args) == {"agent_name", "task_description"}))
        is_error, answer = rig.call(tool, args)
        if not reaches_worker(name):
            assert is_error and answer["error"] in ("not_found", "bad_request"), (tool, short(args), answer)
        if isinstance(name, str) and any(name.strip().lower() == o for o in OUTSIDERS):
            assert answer.get("error") in ("not_found", "bad_request"), answer
    run()


CREATE_FIELDS = {
    "name": st.one_of(any_value, spellings(WORKER), spellings("fresh-agent"), st.sampled_from(["new", "Create"])),
    "project": st.one_of(any_value, st.sampled_from(["fleet-demo", "Research Lab", "docker", "Docker Containers"])),
    "spec": st.one_of(any_value, blank, st.just("Build it")),
    "role": st.one_of(any_value, st.sampled_from(["coder", "Coder", "CODER", " coder", "admin", "owner"])),
}
GOOD_CREATE = {"name": "fresh-agent", "project": "fleet-demo", "spec": "Build it", "role": "coder"}
create_arguments = st.one_of(
    arguments(CREATE_FIELDS),  # anything goes
    st.sampled_from(list(CREATE_FIELDS)).flatmap(  # one bad field among good ones: each check on its own
        lambda bad: CREATE_FIELDS[bad].map(lambda value: {**GOOD_CREATE, bad: value})),
)


def test_create_agent_refuses_bad_input_and_creates_nothing(rig: Rig) -> None:
    @settings(SETTINGS, max_examples=300)
    @given(create_arguments)
    def run(args: dict[str, Any]) -> None:
        assume(not could_create(args))
        is_error, answer = rig.call("create_agent", args)
        assert is_error and answer["error"] in ("bad_request", "not_found"), (short(args), answer)
    run()


EDGES = ["\n", "\r\n", " ", "\t", "\x00", "\x0b", "\u200b", "\u00a0", "\u2028", "-", "_", ".", "/", "%0A", "é"]
edged_names = st.tuples(st.sampled_from(["", *EDGES]), st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8})?", fullmatch=True),
                        st.sampled_from(["", *EDGES])).filter(lambda t: t[0] or t[2]).map("".join)


def test_create_agent_refuses_names_outside_coders_rule(rig: Rig) -> None:
    """A valid name with one stray character before or after it: refused before Coder is asked."""
    @settings(SETTINGS, max_examples=150)
    @given(edged_names)
    def run(name: str) -> None:
        is_error, answer = rig.call("create_agent", {**GOOD_CREATE, "name": name})
        assert is_error and answer["error"] == "bad_request", (repr(name), answer)
    run()


list_calls = st.one_of(
    st.tuples(st.just("list_agents"), arguments({"status": st.one_of(any_value, st.sampled_from(
        ["idle", "busy", "offline", "IDLE", "idle ", "deleted"])), "project": st.one_of(any_value, st.sampled_from(
            ["fleet-demo", "Fleet Demo", "docker"]))})),
    st.tuples(st.just("list_agent_roles"), arguments({"project": st.one_of(any_value, st.sampled_from(
        ["fleet-demo", "FLEET-DEMO", "Research Lab", "docker"]))})),
    st.tuples(st.just("list_agent_projects"), arguments({})),
)


def test_lists_answer_every_input_and_show_only_the_fleet(rig: Rig) -> None:
    @settings(SETTINGS, max_examples=300)
    @given(list_calls)
    def run(call: tuple[str, dict[str, Any]]) -> None:
        tool, args = call
        is_error, answer = rig.call(tool, args)
        if is_error:
            return
        if tool == "list_agents":
            assert [a["name"] for a in answer["agents"]] in ([], [WORKER]), (short(args), answer)
        if tool == "list_agent_projects":
            assert {p["name"] for p in answer["projects"]} == {"fleet-demo", "fleet-research"}
        if tool == "list_agent_roles":
            assert {r["name"] for r in answer["roles"]} == ROLES
    run()


outsider_calls = st.tuples(st.sampled_from(AGENT_TOOLS), st.sampled_from(OUTSIDERS).flatmap(spellings))


def test_foreign_and_hand_made_workspaces_are_out_of_reach_whatever_the_spelling(rig: Rig) -> None:
    @settings(SETTINGS, max_examples=250)
    @given(outsider_calls)
    def run(call: tuple[str, str]) -> None:
        tool, name = call
        args = {"agent_name": name} | ({"task_description": "Take over"} if tool == "start_agent_task" else {})
        is_error, answer = rig.call(tool, args)
        assert is_error and answer["error"] == "not_found", (tool, repr(name), answer)
    run()


def test_an_owner_token_still_sees_only_its_own_fleet(rig: Rig) -> None:
    """The demo user is a site owner: Coder would show it alice's workspaces; the fleet never does."""
    b = rig.emulator.backend
    assert "owner" in next(u for u in b.users.values() if u.username == "demo").roles
    alice = next(w for w in b.workspaces.values() if w.name == "alice-agent")
    assert next(v for n, v in alice.latest_build.parameters if n == "fleet_mcp_managed") == "true"
    assert rig.call("list_agents", {})[1]["agents"][0]["name"] == WORKER
    assert [a["name"] for a in rig.call("list_agents", {})[1]["agents"]] == [WORKER]
    for name in OUTSIDERS:
        for tool in AGENT_TOOLS:
            extra = {"task_description": "x"} if tool == "start_agent_task" else {}
            assert rig.call(tool, {"agent_name": name, **extra})[1]["error"] == "not_found", (tool, name)
    assert rig.call("show_agent", {"agent_name": WORKER})[1]["agent"]["name"] == WORKER
    assert rig.call("show_agent", {"agent_name": WORKER.upper()})[1]["agent"]["name"] == WORKER


def test_zz_cases_counted() -> None:
    if not CALLS["n"]:
        pytest.skip("no property ran (deselected)")
    print(f"\nbad input: {CALLS['n']} tool calls made, every one a contract error or a valid success, "
          "none changing anything")
