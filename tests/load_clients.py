"""MCP clients at once over streamable HTTP, mixed tool calls each: the load test's clients and
`bench/load.py`'s, one code. Each client checks every answer it gets (its own agents only, the envelope
it may get), so any size run proves isolation; the bench's sizes measure throughput.

It imports neither fleet_mcp nor pytest: it drives the fleet only through its processes.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROLES = ["coder", "operator", "manager"]
PROJECTS = ["fleet-demo", "fleet-research"]
SEED_SPEC = "Benchmark agent"  # the spec of every agent `POST /emulator/fleet` seeds
SEEDED = 2  # running fleet agents per client, seeded before the load
ROUND = 10  # calls in `Client.round`
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

    async def call(self, tool: str, allowed: tuple[str, ...] = (), **arguments: Any) -> dict[str, Any] | None:
        """The structured answer, or None for an allowed envelope; anything else is a problem."""
        assert self.session is not None
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
            found: dict[str, Any] | None = result.structured_content
            return found
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
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
                self.expect(tags <= {self.tag} and bool(tags or SEED_SPEC in task["message"] or not task["message"]),
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


def seed_clients(coder_url: str, token: str, count: int) -> list[Client]:
    """`count` clients with SEEDED running agents each (names `lcNN-0001`...), their workspace ids read from Coder."""
    clients = []
    with httpx.Client(base_url=coder_url, headers={"Coder-Session-Token": token}, timeout=120) as http:
        for i in range(count):
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


async def run_client(url: str, client: Client, era: str, rounds: int, start: asyncio.Event) -> None:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await getattr(session, era)()
        client.session = session
        await start.wait()  # every client connected: the calls start together
        for n in range(1, rounds + 1):
            await client.round(n)


async def load(url: str, clients: list[Client], rounds: int, timeout_s: float) -> float:
    """Every client connects (both protocol eras, alternately), then all make `rounds` rounds at once; the
    seconds from the start of the calls to the last answer."""
    start = asyncio.Event()
    async with asyncio.timeout(timeout_s), asyncio.TaskGroup() as group:
        for i, client in enumerate(clients):
            group.create_task(run_client(url, client, "initialize" if i % 2 else "discover", rounds, start))
        while sum(c.session is not None for c in clients) < len(clients):
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        start.set()
    return time.perf_counter() - t0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(clients: list[Client], wall: float) -> dict[str, Any]:
    """What the run did: calls, outcomes, problems (each client's), latency and throughput."""
    records = [r for c in clients for r in c.records]
    latencies = [r.seconds * 1e3 for r in records] or [0.0]
    return {
        "clients": len(clients), "calls": len(records), "wall_s": round(wall, 2),
        "calls_per_s": round(len(records) / wall, 1) if wall else None,
        "outcomes": dict(Counter(r.outcome for r in records)),
        "problems": [f"{c.tag}: {p}" for c in clients for p in c.problems],
        "tasks_started": sum(c.tasks_sent for c in clients),
        "latency_ms": {"p50": round(percentile(latencies, 50)), "p99": round(percentile(latencies, 99)),
                       "max": round(max(latencies))},
        "median_ms_per_tool": {tool: round(statistics.median(r.seconds * 1e3 for r in records if r.tool == tool))
                               for tool in sorted({r.tool for r in records})},
    }
