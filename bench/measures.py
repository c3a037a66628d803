"""What the benchmark measures, phase by phase, against the stand-in Coder (see run.py for the figures).

Each phase records the answers its calls need from the emulator first (the stand-in in `record`
mode), then measures with the stand-in replaying them after the injected latency: the fleet's
own work is what is left of a call's wall time once the time Coder held its requests is taken out.
The stdio phases share one `fleet-mcp` process (`Bench.fleet`); cold starts spawn their own.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import http_cpu
import overhead
from coder import BARE_SERVER, ERAS, Coder, call, stdio_session
from mcp import ClientSession

from tests.processes import clean_env, cpu_seconds, fleet_command, rss_kb

POLL_GAP_S = 0.25  # requests further apart than this belong to different polls of wait_for_agents
WAIT_TIMEOUT_S = 11  # long enough to see a first progress notification sent within 10 s
QUICK_WAIT_TIMEOUT_S = 3  # --quick: a first progress later than this is not seen (the figure is then n/a)
CHANGE_AFTER_S = (2.05, 2.7, 3.4)  # when the awaited agent stops: just after a poll (the worst case), mid, late
ISSUE_13_TOOLS = ("wait_for_agents", "show_agents")


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


def med(values) -> float:
    return statistics.median(list(values))


class Bench:
    def __init__(self, args: argparse.Namespace, coder: Coder, workdir: str) -> None:
        self.args = args
        self.coder = coder
        self.workdir = workdir
        self.latency_ms = args.latency_ms
        bare = Path(workdir, "bare_server.py")
        bare.write_text(BARE_SERVER)
        self.bare_cmd = [sys.executable, str(bare)]
        self.fleet_cmd = fleet_command()
        self.bare_env = clean_env()
        self.fleet_env = clean_env(CODER_URL=coder.url, CODER_SESSION_TOKEN=coder.token)
        self.tools: set[str] = set()
        self.warm = 3 if args.smoke else 10  # calls before a CPU measure: lazily built validators, first-use imports
        self.stack = contextlib.AsyncExitStack()
        self.session: ClientSession | None = None
        self.fleet_pid = 0
        self.shown: dict[str, dict] = {}  # show_agent's answer for each agent of the fleet of 10 (the floors')
        self.routes: dict[str, list[str]] = {}  # and the paths it asked Coder
        self.listed: dict = {}  # list_agents' answer on that fleet

    async def fleet(self) -> ClientSession:
        """The stdio phases' `fleet-mcp` process, started and initialized on first use; stopped by `close`."""
        if self.session is None:
            self.session, self.fleet_pid = await self.stack.enter_async_context(
                stdio_session(self.fleet_cmd, self.fleet_env, self.workdir))
            await self.session.initialize()
            self.tools = {t.name for t in (await self.session.list_tools()).tools}
        return self.session

    async def close(self) -> None:
        await self.stack.aclose()

    async def timed(self, session: ClientSession, tool: str, **arguments) -> tuple[float, dict, dict]:
        """(wall seconds, the stand-in's counts, answer) of one call."""
        self.coder.clear()
        t0 = time.perf_counter()
        answer = await call(session, tool, **arguments)
        wall = time.perf_counter() - t0
        return wall, self.coder.stats(), answer

    def misses(self, stats: dict) -> None:
        if stats["misses"]:
            raise RuntimeError(f"the stand-in had no recorded answer for {stats['misses'][:5]}")

    # --- show_agent, create_agent, list_agents over stdio ---------------------------------

    async def calls(self, calls: int, runs: int) -> dict:
        """Records what the tools ask Coder on a fleet of 10 agents, then measures show_agent and create_agent."""
        out: dict = {}
        names = self.coder.reseed(10)
        self.coder.record()
        session = await self.fleet()
        await call(session, "list_agent_projects")
        self.listed = await call(session, "list_agents")
        self.shown = {name: await call(session, "show_agent", agent_name=name) for name in names}
        await call(session, "create_agent", name="made-0", project="fleet-demo", spec="Bench.")
        out.update(await self.show_agent(session, names, calls, runs))
        out.update(await self.create_agent(session, runs))
        out["standin_cost_ms"] = round(self.coder.own_cost_ms(200), 3)
        return out

    async def show_agent(self, session: ClientSession, names: list[str], calls: int, runs: int) -> dict:
        """show_agent's overhead, wall / latency, requests and dependent round trips (answers recorded)."""
        out: dict = {}
        self.coder.replay(self.latency_ms)
        shows = []
        for i in range(calls + 3):
            if i == 3:
                before = cpu_seconds(self.fleet_pid)
            wall, stats, answer = await self.timed(session, "show_agent", agent_name=names[i % len(names)])
            self.misses(stats)
            if answer["agent"]["name"] != names[i % len(names)]:
                raise RuntimeError(f"show_agent answered about {answer['agent']['name']}")
            shows.append((wall, stats))
            self.routes[names[i % len(names)]] = [route.split(" ", 1)[1] for route in stats["routes"]]
        out["show_agent_cpu_ms"] = round((cpu_seconds(self.fleet_pid) - before) * 1e3 / calls, 3)
        shows = shows[3:]
        out["tool_overhead_ms"] = ms(med(w - s["busy_ms"] / 1e3 for w, s in shows))
        out["show_agent_wall_ms"] = ms(med(w for w, _ in shows))
        out["show_agent_latencies"] = round(med(w for w, _ in shows) * 1e3 / self.latency_ms, 2)
        out["show_agent_requests"] = int(med(s["requests"] for _, s in shows))
        out["show_agent_routes"] = shows[-1][1]["routes"]
        out["standin_latency_error_ms"] = round(med(h for _, s in shows for h in s["holds_ms"]) - self.latency_ms,
                                                3)

        # The same calls with Coder answering at once: the fleet's own time when the process never waits idle
        # (an idle wait costs a wake-up and cold caches after it, which the bare server's call never pays).
        self.coder.replay(0)
        idle_free = []
        for i in range(calls + 3):
            wall, stats, _ = await self.timed(session, "show_agent", agent_name=names[i % len(names)])
            self.misses(stats)
            idle_free.append(wall - stats["busy_ms"] / 1e3)
        out["tool_overhead_at_0_ms"] = ms(med(idle_free[3:]))

        # Dependent round trips: at a latency far above the fleet's own time, the time Coder held the call's
        # requests (busy: concurrent ones count once) / latency rounds to them, however busy the machine (the
        # wall time would count the fleet's own time too, which load stretches).
        rt_latency = self.args.round_trip_latency_ms
        self.coder.replay(rt_latency)
        held = []
        for i in range(runs):
            _, stats, _ = await self.timed(session, "show_agent", agent_name=names[i])
            self.misses(stats)
            held.append(stats["busy_ms"])
        out["show_agent_round_trips"] = round(med(held) / rt_latency)
        return out

    async def create_agent(self, session: ClientSession, runs: int) -> dict:
        """create_agent's Coder requests and wall time with warm caches (`made-0`'s answers recorded)."""
        out: dict = {}
        self.coder.replay(self.latency_ms)
        creates = []
        for _ in range(runs + 1):  # the first one warms whatever the server caches
            wall, stats, answer = await self.timed(session, "create_agent", name="made-0", project="fleet-demo",
                                                   spec="Bench.")
            self.misses(stats)
            if answer["agent"]["name"] != "made-0":
                raise RuntimeError(f"create_agent answered about {answer['agent']['name']}")
            creates.append((wall, stats))
        out["create_agent_wall_ms"] = ms(med(w for w, _ in creates[1:]))
        out["create_agent_requests"] = int(med(s["requests"] for _, s in creates[1:]))
        out["create_agent_routes"] = creates[-1][1]["routes"]
        return out

    async def list_sizes(self, sizes: list[int], runs: int) -> dict:
        """list_agents at each fleet size: wall, Coder requests, the fleet's own time (wall - Coder's hold), and the
        CPU per call of the server (from /proc, in 10 ms ticks) and of this process (the `mcp` client reading and
        checking the answer against the tool's output schema)."""
        out = {}
        session = await self.fleet()
        for size in sizes:
            self.coder.reseed(size)
            self.coder.record()
            await call(session, "list_agents")
            self.coder.replay(self.latency_ms)
            measured = []
            server_before, client_before = cpu_seconds(self.fleet_pid), time.process_time()
            for _ in range(runs):
                wall, stats, answer = await self.timed(session, "list_agents")
                self.misses(stats)
                if answer["total_count"] != size:
                    raise RuntimeError(f"list_agents found {answer['total_count']} agents of {size}")
                measured.append((wall, stats))
            server_cpu, client_cpu = cpu_seconds(self.fleet_pid) - server_before, time.process_time() - client_before
            requests = {s["requests"] for _, s in measured}
            out[str(size)] = {"wall_ms": ms(med(w for w, _ in measured)), "coder_requests": max(requests),
                              "server_cpu_ms": ms(server_cpu / runs), "client_cpu_ms": ms(client_cpu / runs),
                              "coder_requests_varied": len(requests) > 1,
                              "overhead_ms": ms(med(w - s["busy_ms"] / 1e3 for w, s in measured))}
        return {"list_agents": out}

    async def bare_calls(self, session: ClientSession, pid: int, calls: int) -> dict:
        """Median wall time of the bare server's trivial call over stdio (the MCP round trip alone), and what
        is left of it when the call first waits idle for the injected latency (the wake-up after it), with
        the server's CPU per such call."""
        out = {}
        for figure, wait_ms in (("bare_tool_call_ms", 0), ("bare_waiting_call_ms", self.latency_ms)):
            walls = []
            for i in range(calls + 3):
                if i == 3:
                    before = cpu_seconds(pid)
                t0 = time.perf_counter()
                answer = await call(session, "echo", text="hi", wait_ms=wait_ms)
                waited = float(answer["result"]) if wait_ms else 0.0
                walls.append(time.perf_counter() - t0 - waited)
            out[figure] = ms(med(walls[3:]))
        out["bare_waiting_call_cpu_ms"] = round((cpu_seconds(pid) - before) * 1e3 / calls, 3)
        return out

    # --- start-up and memory ------------------------------------------------------------

    async def cold_start(self, kind: str, first_agent: str, then=None) -> tuple[float, int, float]:
        """(spawn -> tools/list answered, VmRSS after three calls, CPU ms the server used until tools/list);
        `then(session, pid)` runs after, on the same server."""
        command, env = (self.fleet_cmd, self.fleet_env) if kind == "fleet" else (self.bare_cmd, self.bare_env)
        t0 = time.perf_counter()
        async with stdio_session(command, env, self.workdir) as (session, pid):
            await session.initialize()
            tools = (await session.list_tools()).tools
            started = time.perf_counter() - t0
            used = cpu_seconds(pid) * 1e3
            if len(tools) < (10 if kind == "fleet" else 1):
                raise RuntimeError(f"{kind}: only {len(tools)} tools listed")
            calls = ([("list_agent_projects", {}), ("list_agents", {}), ("show_agent", {"agent_name": first_agent})]
                     if kind == "fleet" else [("echo", {"text": "hi"})] * 3)
            for tool, arguments in calls:
                await call(session, tool, **arguments)
            rss = rss_kb(pid)
            if then is not None:
                await then(session, pid)
            return started, rss, used

    async def cold_starts(self, runs: int, calls: int) -> dict:
        """Alternating spawns of the bare and the fleet server (the stand-in answering at the latency); the
        first bare server then measures `bare_calls`."""
        self.coder.replay(self.latency_ms)
        seen: dict[str, list[tuple[float, int, float]]] = {"fleet": [], "bare": []}
        out: dict = {}

        async def bare_calls(session: ClientSession, pid: int) -> None:
            out.update(await self.bare_calls(session, pid, calls))

        for i in range(runs):
            for kind in (("bare", "fleet") if i % 2 == 0 else ("fleet", "bare")):
                then = bare_calls if kind == "bare" and i == 0 else None
                seen[kind].append(await self.cold_start(kind, "bench-0001", then))
        self.misses(self.coder.stats())
        start = {k: med(s for s, _, _ in v) for k, v in seen.items()}
        mem = {k: med(r for _, r, _ in v) for k, v in seen.items()}
        busy = {k: med(c for _, _, c in v) for k, v in seen.items()}
        return {**out, "cold_start_ratio": round(start["fleet"] / start["bare"], 3),
                "cold_start_ms": {k: ms(v) for k, v in start.items()},
                # CPU the server used until tools/list: less sensitive to other load on the machine.
                "cold_start_cpu_ratio": round(busy["fleet"] / busy["bare"], 3),
                "cold_start_cpu_ms": {k: round(v, 1) for k, v in busy.items()},
                "rss_ratio": round(mem["fleet"] / mem["bare"], 3),
                "rss_kb": {k: int(v) for k, v in mem.items()}}

    # --- server CPU per call over streamable HTTP, and the floors (issue 33) ----------------

    async def server_cpu(self, calls: int, breakdown: bool = False) -> dict:
        """CPU ms per call of the fleet's list_agents (10 agents), its floor (`http_cpu`'s bare_listing) and
        the bare server's echo, over HTTP, in each protocol era (the 2026-07-28 era's calls cost the server
        more); the ratio is the worse era's, over the floor. `breakdown`: `http_cpu`'s other servers too."""
        labels = http_cpu.SERVERS if breakdown else ("fleet", "bare_echo", "bare_listing")
        figures = await http_cpu.breakdown(self.coder, self.workdir, self.listed, calls, labels, self.warm)
        cpu = {name + suffix: figures[label][era] for label, name in (
            ("fleet", "fleet_list_agents"), ("bare_echo", "bare_echo"), ("bare_listing", "bare_listing"))
               for era, suffix in ERAS.items()}
        out = {"server_cpu_ms_per_call": cpu, "server_cpu_ratio": http_cpu.ratio(figures, "fleet", "bare_listing")}
        return {**out, "http_cpu": {"calls": calls, **figures}} if breakdown else out

    async def overhead_floor(self, calls: int, breakdown: bool = False) -> dict:
        """`overhead`'s bare_requests (a bare FastMCP server asking Coder what show_agent asks, at once,
        through httpx) measured as show_agent's overhead is; `breakdown`: its bare_answer and
        fleet_from_memory too."""
        labels = ("bare_answer", "bare_requests", "fleet_from_memory") if breakdown else ("bare_requests",)
        answers = {name: self.shown[name] for name in self.routes}
        rows = await overhead.breakdown(self.coder, self.workdir, answers, self.routes, calls, self.latency_ms,
                                        labels, self.warm)
        return {"floors": {"bare_requests": rows.pop("bare_requests")}, **({"overhead": rows} if breakdown else {})}

    # --- real-sized answers (issue 23) ------------------------------------------------------

    async def real_sized(self, sizes: list[int], runs: int, cpu_calls: int) -> dict:
        """list_agents at each size, server CPU per list_agents of 10 over HTTP, and wait_for_agents over 100,
        on the emulator's lean workspace answers and then on real-sized ones (each carrying a recorded v2.27
        workspace's bulk, ~47 KB)."""
        out: dict = {}
        for bodies in ("lean", "real"):
            self.coder.real_bodies = bodies == "real"
            lists = (await self.list_sizes(sizes, runs))["list_agents"]
            workspace_bytes = self.coder.stats()["workspace_bytes_median"] if bodies == "real" else None
            self.coder.reseed(10)
            self.coder.record()
            self.listed = await call(await self.fleet(), "list_agents")
            cpu = await self.server_cpu(cpu_calls)
            wait = await self.wait_for_agents(await self.fleet(), runs)
            out[bodies] = {"list_agents": lists, **cpu, "workspace_bytes": workspace_bytes,
                           **{k: v for k, v in wait.items() if k in ("wait_requests_per_poll", "wait_polls",
                                                                     "wait_first_progress_s", "wait_seen_after_s")}}
        self.coder.real_bodies = False
        return {"real_sized": out}

    # --- issue 13's tools, when the server has them -----------------------------------------

    async def issue_13(self, runs: int) -> dict:
        out: dict = {"wait_requests_per_poll": None, "wait_polls": None, "wait_first_progress_s": None,
                     "wait_answer_delay_s": None, "wait_seen_after_s": None, "show_agents_20_latencies": None,
                     "errors": {}}
        missing = [t for t in ISSUE_13_TOOLS if t not in self.tools]
        out["tools_missing"] = missing
        if len(missing) == len(ISSUE_13_TOOLS):
            return out
        session = await self.fleet()
        for tool, measure in (("show_agents", self.show_agents), ("wait_for_agents", self.wait_for_agents)):
            if tool in missing:
                continue
            try:
                out.update(await measure(session, runs))
            except Exception as exc:  # noqa: BLE001 - a failing new tool is a finding to print, not a crash
                out["errors"][tool] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return out

    async def show_agents(self, session: ClientSession, runs: int) -> dict:
        names = self.coder.reseed(20)
        self.coder.record()
        await call(session, "show_agents", agent_names=names)
        self.coder.replay(self.latency_ms)
        walls = []
        for _ in range(runs):
            wall, stats, _ = await self.timed(session, "show_agents", agent_names=names)
            self.misses(stats)
            walls.append(wall)
        return {"show_agents_20_latencies": round(med(walls) * 1e3 / self.latency_ms, 2)}

    async def wait_for_agents(self, session: ClientSession, runs: int) -> dict:
        """Waits on 100 running agents for a condition that never comes, until its timeout."""
        names = self.coder.reseed(100)
        self.coder.record()
        await call(session, "wait_for_agents", agent_names=names, until="stopped", timeout_s=1)
        self.coder.replay(self.latency_ms)
        progress: list[float] = []

        async def heard(done: float, total: float | None, message: str | None) -> None:
            progress.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        answer = await call(session, "wait_for_agents", heard, agent_names=names, until="stopped",
                            timeout_s=QUICK_WAIT_TIMEOUT_S if self.args.quick else WAIT_TIMEOUT_S)
        stats = self.coder.stats()
        self.misses(stats)
        if not answer.get("timed_out"):
            raise RuntimeError(f"wait_for_agents did not time out: {str(answer)[:300]}")
        polls: list[int] = []
        last = None
        for arrived in stats["arrivals_ms"]:
            if last is None or arrived - last > POLL_GAP_S * 1e3:
                polls.append(0)
            polls[-1] += 1
            last = arrived
        return {"wait_requests_per_poll": max(polls) if polls else 0, "wait_polls": len(polls),
                "wait_first_progress_s": round(progress[0], 2) if progress else None,
                **await self.wait_answer(session, names)}

    async def wait_answer(self, session: ClientSession, names: list[str]) -> dict:
        """How long after the condition comes true a wait's poll reads it, and the wait answers: one of 100
        agents stops, in Coder's answers, at moments spread over a poll interval."""
        self.coder.stop(names[0])
        self.coder.record(later=True)
        answer = await call(session, "wait_for_agents", agent_names=names, until="stopped", mode="any", timeout_s=5)
        if answer.get("timed_out") or answer.get("met") != [names[0]]:
            raise RuntimeError(f"the stopped agent was not seen: {str(answer)[:300]}")
        delays, seen = [], []
        for change_after_s in CHANGE_AFTER_S[:1] if self.args.quick else CHANGE_AFTER_S:
            self.coder.replay(self.latency_ms, change_after_s)
            t0 = time.perf_counter()
            answer = await call(session, "wait_for_agents", agent_names=names, until="stopped", mode="any",
                                timeout_s=30)
            delays.append(time.perf_counter() - t0 - change_after_s)
            stats = self.coder.stats()
            self.misses(stats)
            if answer.get("met") != [names[0]] or stats["first_changed_ms"] is None:
                raise RuntimeError(f"wait_for_agents answered without the stopped agent: {str(answer)[:300]}")
            seen.append((stats["first_changed_ms"] - stats["changed_at_ms"]) / 1e3)
        return {"wait_seen_after_s": round(max(seen), 3), "wait_seen_after_all_s": [round(d, 3) for d in seen],
                "wait_answer_delay_s": round(max(delays), 3), "wait_answer_delays_s": [round(d, 3) for d in delays]}
