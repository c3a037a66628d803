"""Load: 50 MCP clients at once over streamable HTTP, 40 mixed tool calls each, against
`fleet-mcp --transport http` over a `fleet-mcp emulator` on a real socket (real time).

Every call must succeed or answer only the envelope it may (start_agent_task on a
busy agent: `conflict`), and no client may see another's agent where it asked about
its own: show_agent names its agent and its workspace id, a created agent carries its
creator's spec, an agent's log holds only its own client's tasks. p50/p99 latency and
the totals are printed.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.processes import SERVER, clean_env, cpu_seconds, emulator_process, http_server

CLIENTS = 50
CALLS = 40  # per client: four rounds of the ten calls of `Client.round`
SEEDED = 2  # running fleet agents per client, seeded before the load
LOAD_TIMEOUT_S = 90.0
ROLES = ["coder", "operator", "manager"]
PROJECTS = ["fleet-demo", "fleet-research"]
SEED_SPEC = "Benchmark agent"  # the spec of every agent `POST /emulator/fleet` seeds
pytestmark = [pytest.mark.system, pytest.mark.slow]
TAG = re.compile(r"\blc\d\d\b")


@dataclass
class Record:
    tool: str
    seconds: float
    outcome: str  # "ok" or the envelope's error code


@dataclass
class Client:
    """One MCP client: its own tag, its seeded agents (name -> workspace id), the agents it creates."""

    tag: str
    seeded: dict[str, str]
    session: ClientSession | None = None
    records: list[Record] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tasks_sent: int = 0

    async def call(self, tool: str, allowed: tuple[str, ...] = (), **arguments) -> dict | None:
        """The structured answer, or None for an allowed envelope; anything else is a problem."""
        t0 = time.perf_counter()
        try:
            result = await self.session.call_tool(tool, arguments)
        except Exception as exc:  # noqa: BLE001 - a transport or protocol failure is a finding, not a crash
            self.records.append(Record(tool, time.perf_counter() - t0, "exception"))
            self.problems.append(f"{tool}{arguments}: {type(exc).__name__}: {exc}")
            return None
        elapsed = time.perf_counter() - t0
        if not result.is_error:
            self.records.append(Record(tool, elapsed, "ok"))
            return result.structured_content
        text = result.content[0].text if result.content else ""
        try:
            envelope = json.loads(text)
        except ValueError:
            envelope = {}
        code = envelope.get("error") if set(envelope) == {"error", "message", "details"} else None
        self.records.append(Record(tool, elapsed, code or "not-an-envelope"))
        if code not in allowed:
            self.problems.append(f"{tool}{arguments}: unexpected error answer {text[:300]!r}")
        return None

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            self.problems.append(what)

    async def round(self, n: int) -> None:
        """Ten calls: reads of its own agents and the catalogue, a task, and create/show/delete of a new agent."""
        first, second = list(self.seeded)
        listed = await self.call("list_agents")
        if listed is not None:
            names = {a["name"] for a in listed["agents"]}
            self.expect(set(self.seeded) <= names, f"list_agents lacks {set(self.seeded) - names}")

        shown = await self.call("show_agent", agent_name=first)
        if shown is not None:
            agent = shown["agent"]
            self.expect((agent["name"], agent["workspace_id"]) == (first, self.seeded[first]),
                        f"show_agent {first} answered {agent['name']} {agent['workspace_id']}")

        projects = await self.call("list_agent_projects")
        if projects is not None:
            self.expect([p["name"] for p in projects["projects"]] == PROJECTS, f"projects {projects}")

        roles = await self.call("list_agent_roles", project="fleet-demo")
        if roles is not None:
            self.expect([r["name"] for r in roles["roles"]] == ROLES, f"roles {roles}")

        started = await self.call("start_agent_task", allowed=("conflict",), agent_name=second,
                                  task_description=f"{self.tag} task {n} [[finish:1]]")
        if started is not None:
            self.tasks_sent += 1
            self.expect(started["agent_status"] == "busy" and self.tag in started["task"]["message"],
                        f"start_agent_task answered {started}")

        history = await self.call("show_agent_task_history", agent_name=second)
        if history is not None:
            for task in history["tasks"]:  # e.g. "Working on: lc07 task 2", "Done: Benchmark agent"
                tags = set(TAG.findall(task["message"]))
                self.expect(tags <= {self.tag} and (tags or SEED_SPEC in task["message"] or not task["message"]),
                            f"{second}'s history holds {task['message']!r}")

        log = await self.call("show_agent_log", agent_name=second, page_size=100)
        if log is not None:
            for message in log["messages"]:
                if message["role"] == "user":
                    self.expect(message["content"].startswith(f"{self.tag} task "),
                                f"{second}'s log holds user message {message['content'][:80]!r}")

        name, spec = f"{self.tag}-n{n}", f"Load test agent {n} of {self.tag}."
        created = await self.call("create_agent", name=name, project="fleet-demo", spec=spec)
        workspace_id = None
        if created is not None:
            agent = created["agent"]
            workspace_id = agent["workspace_id"]
            self.expect((agent["name"], agent["spec"]) == (name, spec), f"create_agent {name} answered {agent}")

        shown = await self.call("show_agent", agent_name=name)
        if shown is not None:
            agent = shown["agent"]
            self.expect((agent["name"], agent["workspace_id"], agent["spec"]) == (name, workspace_id, spec),
                        f"show_agent {name} answered {agent['name']} {agent['workspace_id']} {agent['spec']!r}")

        deleted = await self.call("delete_agent", agent_name=name)
        if deleted is not None:
            gone = deleted["deleted_agent"]
            self.expect((gone["name"], gone["workspace_id"]) == (name, workspace_id),
                        f"delete_agent {name} answered {gone}")


async def run_client(url: str, client: Client, era: str, start: asyncio.Event) -> None:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await getattr(session, era)()
        client.session = session
        await start.wait()  # every client connected: the calls start together
        for n in range(1, CALLS // 10 + 1):
            await client.round(n)


@pytest.fixture(scope="module")
def coder():
    """A `fleet-mcp emulator` on a real socket (real time)."""
    with emulator_process() as emulated:
        yield emulated


@pytest.fixture(scope="module")
def fleet(coder, tmp_path_factory):
    """`fleet-mcp --transport http` on a free loopback port, pointed at the emulator."""
    with http_server(tmp_path_factory.mktemp("load"), command=SERVER,
                     env=clean_env(CODER_URL=coder.url, CODER_SESSION_TOKEN=coder.token,
                                   FLEET_MCP_MAX_AGENTS="0")) as server:  # 100 agents: beyond the default cap
        yield server


def seed_clients(coder_url: str, token: str) -> list[Client]:
    """SEEDED running agents per client (names `lcNN-0001`...), with their workspace ids read from Coder."""
    clients = []
    with httpx.Client(base_url=coder_url, headers={"Coder-Session-Token": token}, timeout=30) as http:
        for i in range(CLIENTS):
            tag = f"lc{i:02d}"
            r = http.post("/emulator/fleet", json={"count": SEEDED, "prefix": tag})
            r.raise_for_status()
            ids = {}
            for name in r.json()["names"]:
                ws = http.get(f"/api/v2/users/me/workspace/{name}")
                ws.raise_for_status()
                ids[name] = ws.json()["id"]
            clients.append(Client(tag, ids))
    return clients


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def test_fifty_clients_forty_calls_each(coder, fleet, capsys):
    url = fleet.url
    clients = seed_clients(coder.url, coder.token)
    pids = {"fleet server": fleet.proc.pid, "emulator": coder.proc.pid}
    cpu_before = {k: cpu_seconds(pid) for k, pid in pids.items()}
    own_before = time.process_time()

    async def load() -> float:
        start = asyncio.Event()
        async with asyncio.timeout(LOAD_TIMEOUT_S), asyncio.TaskGroup() as group:
            for i, client in enumerate(clients):  # both protocol eras
                group.create_task(run_client(url, client, "initialize" if i % 2 else "discover", start))
            while sum(c.session is not None for c in clients) < CLIENTS:
                await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            start.set()
        return time.perf_counter() - t0

    wall = asyncio.run(load())
    cpu = {k: cpu_seconds(pid) - cpu_before[k] for k, pid in pids.items()}
    cpu["50 clients (this process)"] = time.process_time() - own_before
    records = [r for c in clients for r in c.records]
    problems = [f"{c.tag}: {p}" for c in clients for p in c.problems]
    latencies = [r.seconds * 1e3 for r in records]
    outcomes = Counter(r.outcome for r in records)
    per_tool = {tool: statistics.median(r.seconds * 1e3 for r in records if r.tool == tool)
                for tool in sorted({r.tool for r in records})}
    with capsys.disabled():
        print(f"\nload: {CLIENTS} clients x {CALLS} calls = {len(records)} calls in {wall:.1f} s "
              f"({len(records) / wall:.0f} calls/s); latency p50 {percentile(latencies, 50):.0f} ms, "
              f"p99 {percentile(latencies, 99):.0f} ms, max {max(latencies):.0f} ms; outcomes {dict(outcomes)}; "
              f"tasks started {sum(c.tasks_sent for c in clients)}")
        print("median per tool (ms): " + ", ".join(f"{t} {v:.0f}" for t, v in per_tool.items()))
        print("CPU seconds during the load: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    assert not problems, "\n".join(problems[:20])
    assert len(records) == CLIENTS * CALLS
    assert set(outcomes) <= {"ok", "conflict"}, outcomes
    logs = fleet.logs()
    assert "Traceback" not in logs and "unexpected" not in logs, logs[-3000:]
