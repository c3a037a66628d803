"""Two per-user replicas behind nginx (deploy/nginx.conf, round-robin, no affinity), two Coder users at once.

Each user sees only their own fleet, calls spread over both replicas, and when one replica is stopped
(SIGTERM) mid-load the clients carry on through the other: no doubled create, and no error but the answer
a call cut by the stop gets (nginx never sends a POST twice: "went away", or the replica's own 503), after
which a create is there at most once.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.processes import audit_lines, nginx_binary, nginx_process, per_user_server, stop
from tests.support import ALICE_TOKEN, TOKEN, Tools, emulator_thread, http_tools

pytestmark = [pytest.mark.system, pytest.mark.slow,
              pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (apt-get install nginx)")]

SITE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
USERS = {"demo": (TOKEN, "alice-agent"), "alice": (ALICE_TOKEN, None)}  # token, an agent of the *other* user
CLIENTS_PER_USER = 4
# Each round: 5 calls. Four rounds of eight clients (160 calls) spread over both replicas and keep calling across
# the stop (at 40%): the cut, the spread and the isolation all show; more rounds only repeat them.
ROUNDS = 4
STOP_AFTER = 0.4  # of all calls: then one replica gets SIGTERM
# What a call cut by the stop answers: deploy/nginx.conf's JSON-RPC error, or the draining replica's 503.
CUT = ("replica serving this call went away", "Server returned an error response")


class Load:
    def __init__(self, total: int) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.calls = Counter[str]()
        self.created: dict[str, list[str]] = {user: [] for user in USERS}
        self.cut: list[tuple[str, str, dict[str, Any]]] = []  # calls the stop cut short: (user, tool, arguments)
        self.total = total
        self.halfway = asyncio.Event()

    async def call(self, user: str, tools: Tools, tool: str, expect: str | None = None, also: str | None = None,
                   **arguments: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            answer = await tools(tool, **arguments)
        except Exception as exc:  # noqa: BLE001 - a failed call is a finding, not a crash
            answer = {"error": "exception", "message": f"{type(exc).__name__}: {exc}"}
        self.latencies.append(time.perf_counter() - t0)
        self.calls[user] += 1
        if sum(self.calls.values()) >= STOP_AFTER * self.total:
            self.halfway.set()
        if answer.get("error") == "exception" and any(words in answer["message"] for words in CUT):
            self.cut.append((user, tool, arguments))
        elif answer.get("error") not in (expect, also):
            self.errors.append(f"{user} {tool} {arguments}: expected {expect or 'success'}, got {str(answer)[:300]}")
        return answer

    async def client(self, url: str, user: str, n: int, mine: set[str]) -> None:
        token, theirs = USERS[user]
        async with http_tools(url + "/mcp", token) as client:
            tools = Tools(client)
            for r in range(ROUNDS):
                name = f"{user[:2]}{n}r{r}"
                self.created[user].append(name)
                await self.call(user, tools, "create_agent", name=name, project="fleet-demo", spec=f"{user}'s {r}")
                cut = any(tool == "create_agent" and args["name"] == name for _, tool, args in self.cut)
                maybe = "not_found" if cut else None  # a create the stop cut short may not have been made
                listed = await self.call(user, tools, "list_agents")
                strangers = {a["name"] for a in listed.get("agents", [])} - mine - set(self.created[user])
                if strangers:
                    self.errors.append(f"{user} sees agents not theirs: {sorted(strangers)}")
                await self.call(user, tools, "show_agent", also=maybe, agent_name=name)
                other = theirs or f"de{n}r0"  # alice tries demo's agents, demo tries alice's
                await self.call(user, tools, "show_agent", expect="not_found", agent_name=other)
                await self.call(user, tools, "delete_agent", expect="not_found", agent_name=other)


def test_two_replicas_behind_nginx_two_users_one_replica_stopped(tmp_path, capsys):
    with ExitStack() as stack:
        coder = stack.enter_context(emulator_thread())
        replicas = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            replicas.append(stack.enter_context(per_user_server(
                tmp_path / name, coder.url, FLEET_MCP_AUDIT_LOG=str(tmp_path / f"audit-{name}.jsonl"),
                FLEET_MCP_MAX_AGENTS="0")))
        base = stack.enter_context(nginx_process(tmp_path, SITE.read_text(), [r.port for r in replicas]))
        load = Load(total=len(USERS) * CLIENTS_PER_USER * ROUNDS * 5)
        mine = {"demo": set(), "alice": {"alice-agent"}}
        exit_codes: list[int] = []

        async def run() -> None:
            async def stop_one() -> None:
                await load.halfway.wait()
                exit_codes.append(await asyncio.to_thread(stop, replicas[0].proc))

            stopper = asyncio.create_task(stop_one())
            await asyncio.gather(*(load.client(base, user, n, mine[user])
                                   for user in USERS for n in range(CLIENTS_PER_USER)))
            await stopper
            # Afterwards: each user's fleet holds every create exactly once, and nothing of the other's.
            for user, (token, _) in USERS.items():
                async with http_tools(base + "/mcp", token) as client:
                    listed = await Tools(client)("list_agents")
                names = Counter(a["name"] for a in listed["agents"])
                cut = {args["name"] for who, tool, args in load.cut if who == user and tool == "create_agent"}
                assert all(names[name] == 1 for name in set(load.created[user]) - cut), (user, names)
                assert all(names[name] <= 1 for name in cut), (user, names)
                assert set(names) - cut == mine[user] | (set(load.created[user]) - cut), (user, sorted(names))

        asyncio.run(run())

    per_replica = {name: audit_lines(tmp_path / f"audit-{name}.jsonl") for name in ("a", "b")}
    per_user = Counter(line["user"] for lines in per_replica.values() for line in lines)
    latencies = sorted(load.latencies)
    p50, p99 = statistics.median(latencies), latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    with capsys.disabled():
        print(f"\nnginx: {len(latencies)} calls, per replica {({k: len(v) for k, v in per_replica.items()})}, "
              f"per user {dict(per_user)}, errors {len(load.errors)}, cut by the stop {len(load.cut)}, "
              f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; "
              f"replica a stopped (exit {exit_codes}) after {STOP_AFTER:.0%} of the calls")
    assert load.errors == [], load.errors[:10]
    # Only calls in flight at the stop are cut: a handful at most, out of 160.
    assert len(load.cut) <= 2 * len(USERS) * CLIENTS_PER_USER, load.cut
    assert exit_codes == [0]
    assert len(latencies) == load.total
    # The final list_agents calls count too (2): every call was served and audited once, but a cut one
    # may or may not have reached a tool.
    audited = sum(len(v) for v in per_replica.values())
    assert load.total + len(USERS) - len(load.cut) <= audited <= load.total + len(USERS)
    for name, lines in per_replica.items():
        assert {line["user"] for line in lines} == set(USERS), (name, Counter(line["user"] for line in lines))
    for user in USERS:
        cut = sum(who == user for who, _, _ in load.cut)
        assert load.total // len(USERS) + 1 - cut <= per_user[user] <= load.total // len(USERS) + 1


def test_through_nginx_healthz_answers_and_a_spoofed_client_address_does_not_escape_the_limit(tmp_path, capsys):
    """deploy/nginx.conf passes /healthz on, and replaces whatever X-Forwarded-For a client sends with its own
    address: a guesser changing that header each time still meets the per-address limit (10 a minute)."""
    import httpx

    from tests.processes import INIT, MCP_HEADERS

    with ExitStack() as stack:
        coder = stack.enter_context(emulator_thread())
        replica = stack.enter_context(per_user_server(tmp_path, coder.url))
        base = stack.enter_context(nginx_process(tmp_path, SITE.read_text(), [replica.port, replica.port]))
        with httpx.Client(timeout=10) as http:
            health = http.get(base + "/healthz")
            statuses = Counter(http.post(base + "/mcp", json=INIT, headers={
                **MCP_HEADERS, "Authorization": f"Bearer guess-{n}", "X-Forwarded-For": f"198.51.100.{n}"}).status_code
                for n in range(30))
    with capsys.disabled():
        print(f"\nnginx: /healthz {health.status_code} {health.text}; 30 guesses with spoofed addresses: {dict(statuses)}")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert statuses == {401: 10, 429: 20}
