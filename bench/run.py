#!/usr/bin/env python
"""Benchmark fleet-mcp against the Coder emulator on a real socket, with injected latency.

    python bench/run.py                  # the table (fleet sizes 10, 100, 1000)
    python bench/run.py --json           # one JSON object on one line
    python bench/run.py --quick          # one fleet size, few runs (CI)
    python bench/run.py --latency-ms 50 --sizes 10,100

A `fleet-mcp emulator --port 0` subprocess plays Coder (real time); every Coder API
request (`* /api/*`) and every app-proxy request (`* /@*`) waits `--latency-ms`
before it is answered. The fleet server runs as `fleet-mcp` (stdio) pointed at it,
driven by the official `mcp` SDK client; the reference is a bare FastMCP server
with one trivial tool, started the same way. Figures:

- cold_start_ratio: spawn -> `tools/list` answered, fleet over bare (medians of
  alternating runs; the fleet's start-up includes its two Coder checks).
- rss_ratio: VmRSS of each server after start-up and a few calls.
- tool_overhead_ms: median of show_agent's wall time minus latency x the Coder
  requests it made (show_agent's requests are sequential, so that is exactly the
  time spent waiting on the injected latency).
- list_agents at each fleet size: wall time and Coder requests; show_agent and
  create_agent wall times.

To tell the fleet's own cost from the emulator's, the bench also times the same
Coder requests sent straight to the emulator with httpx (`coder_request_ms`: one
show_agent-sized request, latency included; `coder_ms` per list size: the fleet
query's answer alone). The bench process imports neither fleet_mcp nor the
emulator: both are measured only through their processes. The servers run with
bytecode caching on (PYTHONDONTWRITEBYTECODE unset), as an installed package does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from mcp import ClientSession, StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from processes import child_pids, clean_env, cpu_seconds, emulator_process, fleet_command, rss_kb

if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # as fleet_mcp.coder.client does: httpcore's failed imports cost per request

TOKEN = "bench-token"
FLEET_QUERY = "owner:me param:fleet_mcp_managed=true"
START_TIMEOUT_S = 30.0
PHASE_TIMEOUT_S = 300.0

# Targets (issue "Run it as a service", item 5).
MAX_LIST_REQUESTS = 3
LIST_LATENCIES_AT_100 = 4
MAX_COLD_START_RATIO = 1.15
MAX_RSS_RATIO = 1.25
MAX_TOOL_OVERHEAD_MS = 3.0

BARE_SERVER = textwrap.dedent('''\
    from fastmcp import FastMCP

    mcp = FastMCP("bare")


    @mcp.tool
    async def echo(text: str) -> str:
        """Say it back."""
        return text


    if __name__ == "__main__":
        mcp.run(transport="stdio", show_banner=False)
    ''')


# --- processes --------------------------------------------------------------------

def cpu_ms(pid: int) -> float:
    return cpu_seconds(pid) * 1e3


class EmulatorProcess:
    """`fleet-mcp emulator --port 0` (real time) and a client of its control API."""

    def __init__(self) -> None:
        self._process = emulator_process("--token", TOKEN)
        emulated = self._process.__enter__()
        self.url, self.token = emulated.url, emulated.token
        self.http = httpx.Client(base_url=self.url, timeout=120)
        self.latency_s = 0.0

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        r = self.http.request(method, path, json=body)
        r.raise_for_status()
        return r.json()

    def set_latency(self, seconds: float) -> None:
        self.latency_s = seconds
        self._call("DELETE", "/emulator/faults")
        if seconds:
            for match in ("* /api/*", "* /@*"):
                self._call("POST", "/emulator/faults", {"match": match, "kind": "latency", "seconds": seconds})

    def reseed(self, agents: int, prefix: str = "bench") -> list[str]:
        """The demo seed plus `agents` running fleet agents; the latency faults set again."""
        self._call("POST", "/emulator/reset", {"seed": "demo"})
        names = self._call("POST", "/emulator/fleet", {"count": agents, "prefix": prefix})["names"] if agents else []
        self.set_latency(self.latency_s)
        return names

    def clear_requests(self) -> None:
        self._call("DELETE", "/emulator/requests")

    def requests(self) -> int:
        return self._call("GET", "/emulator/requests")["total"]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.http.close()
        self._process.__exit__(None, None, None)


@contextlib.asynccontextmanager
async def mcp_session(command: list[str], env: dict[str, str], cwd: str) -> AsyncIterator[tuple[ClientSession, int]]:
    """A stdio session with a freshly spawned server, and the server's PID (not yet initialized)."""
    before = child_pids()
    with tempfile.TemporaryFile("w+") as errlog:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=cwd)
        try:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                spawned = child_pids() - before
                if len(spawned) != 1:
                    raise RuntimeError(f"expected one new server process, found {sorted(spawned)}")
                yield session, spawned.pop()
        except BaseException:
            errlog.seek(0)
            sys.stderr.write(errlog.read()[-4000:])
            raise


async def call(session: ClientSession, tool: str, **arguments) -> dict:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text if result.content else result}")
    return result.structured_content


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


# --- the measures -------------------------------------------------------------------

class Bench:
    def __init__(self, args: argparse.Namespace, emulator: EmulatorProcess, workdir: str) -> None:
        self.args = args
        self.emu = emulator
        self.workdir = workdir
        self.latency_ms = args.latency_ms
        bare = Path(workdir, "bare_server.py")
        bare.write_text(BARE_SERVER)
        self.bare_cmd = [sys.executable, str(bare)]
        self.fleet_cmd = fleet_command()
        self.bare_env = clean_env()
        self.fleet_env = clean_env(CODER_URL=emulator.url, CODER_SESSION_TOKEN=emulator.token)

    async def cold_start(self, kind: str, first_agent: str) -> tuple[float, int, float]:
        """(spawn -> tools/list answered, VmRSS after three calls, CPU ms the server used until tools/list)."""
        command, env = (self.fleet_cmd, self.fleet_env) if kind == "fleet" else (self.bare_cmd, self.bare_env)
        t0 = time.perf_counter()
        async with mcp_session(command, env, self.workdir) as (session, pid):
            await session.initialize()
            tools = (await session.list_tools()).tools
            started = time.perf_counter() - t0
            cpu = cpu_ms(pid)
            expected = 10 if kind == "fleet" else 1
            if len(tools) != expected:
                raise RuntimeError(f"{kind}: {len(tools)} tools listed, expected {expected}")
            calls = ([("list_agent_projects", {}), ("list_agents", {}), ("show_agent", {"agent_name": first_agent})]
                     if kind == "fleet" else [("echo", {"text": "hi"})] * 3)
            for tool, arguments in calls:
                await call(session, tool, **arguments)
            rss = rss_kb(pid)
        return started, rss, cpu

    async def cold_starts(self, runs: int, first_agent: str) -> dict:
        times: dict[str, list[float]] = {"fleet": [], "bare": []}
        rss: dict[str, list[int]] = {"fleet": [], "bare": []}
        cpu: dict[str, list[float]] = {"fleet": [], "bare": []}
        for kind in ("bare", "fleet"):  # warm-up: page cache, .pyc files
            await self.cold_start(kind, first_agent)
        for i in range(runs):
            for kind in (("bare", "fleet") if i % 2 == 0 else ("fleet", "bare")):
                started, kb, used = await self.cold_start(kind, first_agent)
                times[kind].append(started)
                rss[kind].append(kb)
                cpu[kind].append(used)
        med = {k: statistics.median(v) for k, v in times.items()}
        mem = {k: statistics.median(v) for k, v in rss.items()}
        busy = {k: statistics.median(v) for k, v in cpu.items()}
        return {"cold_start_ratio": round(med["fleet"] / med["bare"], 3),
                "cold_start_ms": {k: ms(v) for k, v in med.items()},
                # CPU the server process used until tools/list: less sensitive to other load on the machine.
                "cold_start_cpu_ratio": round(busy["fleet"] / busy["bare"], 3),
                "cold_start_cpu_ms": {k: round(v, 1) for k, v in busy.items()},
                "rss_ratio": round(mem["fleet"] / mem["bare"], 3),
                "rss_kb": {k: int(v) for k, v in mem.items()}}

    async def bare_calls(self, calls: int) -> float:
        async with mcp_session(self.bare_cmd, self.bare_env, self.workdir) as (session, _):
            await session.initialize()
            walls = []
            for _ in range(calls + 3):
                t0 = time.perf_counter()
                await call(session, "echo", text="hi")
                walls.append(time.perf_counter() - t0)
        return ms(statistics.median(walls[3:]))

    async def measured(self, session: ClientSession, tool: str, **arguments) -> tuple[float, int, dict]:
        """(wall seconds, Coder requests, answer) of one call."""
        self.emu.clear_requests()
        t0 = time.perf_counter()
        answer = await call(session, tool, **arguments)
        wall = time.perf_counter() - t0
        return wall, self.emu.requests(), answer

    async def coder_alone(self, name: str, calls: int) -> float:
        """Median wall time of one request show_agent makes, sent straight to the emulator."""
        async with httpx.AsyncClient(base_url=self.emu.url, headers={"Coder-Session-Token": self.emu.token}) as raw:
            user = (await raw.get("/api/v2/users/me")).json()["username"]
            ws = (await raw.get(f"/api/v2/users/me/workspace/{name}")).json()
            build = ws["latest_build"]["id"]
            paths = [f"/api/v2/users/me/workspace/{name}", f"/api/v2/workspacebuilds/{build}/parameters",
                     f"/@{user}/{name}/apps/ccw/status", f"/@{user}/{name}/apps/ccw/messages"]
            walls = []
            for _ in range(calls // len(paths) + 2):
                for path in paths:
                    t0 = time.perf_counter()
                    r = await raw.get(path)
                    r.raise_for_status()
                    r.json()
                    walls.append(time.perf_counter() - t0)
        return ms(statistics.median(walls))

    async def list_alone(self, runs: int) -> float:
        """Median wall time of the fleet's workspace query, sent straight to the emulator and decoded."""
        async with httpx.AsyncClient(base_url=self.emu.url, headers={"Coder-Session-Token": self.emu.token},
                                     timeout=120) as raw:
            walls = []
            for _ in range(runs):
                t0 = time.perf_counter()
                r = await raw.get("/api/v2/workspaces", params={"q": FLEET_QUERY})
                r.raise_for_status()
                r.json()
                walls.append(time.perf_counter() - t0)
        return ms(statistics.median(walls))

    async def fleet_calls(self, calls: int, runs: int, sizes: list[int]) -> dict:
        out: dict = {}
        names = self.emu.reseed(10)
        out["coder_request_ms"] = await self.coder_alone(names[0], calls)
        async with mcp_session(self.fleet_cmd, self.fleet_env, self.workdir) as (session, pid):
            await session.initialize()
            await call(session, "list_agent_projects")
            # show_agent: the overhead is what is left once the injected latency is taken out.
            shows = []
            for i in range(calls + 3):
                wall, requests, answer = await self.measured(session, "show_agent", agent_name=names[i % len(names)])
                if answer["agent"]["name"] != names[i % len(names)]:
                    raise RuntimeError(f"show_agent answered about {answer['agent']['name']}")
                shows.append((wall, requests))
            shows = shows[3:]
            out["tool_overhead_ms"] = ms(statistics.median(w - self.emu.latency_s * n for w, n in shows))
            out["show_agent_wall_ms"] = ms(statistics.median(w for w, _ in shows))
            out["show_agent_coder_requests"] = int(statistics.median(n for _, n in shows))
            # What is left once the emulator's own time per request (beyond the latency) is taken out too.
            out["tool_overhead_net_ms"] = ms(out["tool_overhead_ms"] / 1e3 - out["show_agent_coder_requests"]
                                             * (out["coder_request_ms"] - self.latency_ms) / 1e3)
            creates = []
            for i in range(runs):
                wall, requests, answer = await self.measured(
                    session, "create_agent", name=f"made-{i}", project="fleet-demo", spec="Benchmark create.")
                if answer["agent"]["name"] != f"made-{i}":
                    raise RuntimeError(f"create_agent answered about {answer['agent']['name']}")
                creates.append((wall, requests))
            out["create_agent_wall_ms"] = ms(statistics.median(w for w, _ in creates))
            out["create_agent_coder_requests"] = int(statistics.median(n for _, n in creates))
            out["list_agents"] = {}
            for size in sizes:
                self.emu.reseed(size)
                await call(session, "list_agents")  # warm-up after the reseed
                walls, requests = [], set()
                for _ in range(runs):
                    wall, n, answer = await self.measured(session, "list_agents")
                    if answer["total_count"] != size:
                        raise RuntimeError(f"list_agents found {answer['total_count']} agents of {size}")
                    walls.append(wall)
                    requests.add(n)
                out["list_agents"][str(size)] = {"wall_ms": ms(statistics.median(walls)),
                                                 "coder_requests": max(requests),
                                                 "coder_requests_varied": len(requests) > 1,
                                                 "coder_ms": await self.list_alone(runs)}
            out["rss_after_list_kb"] = rss_kb(pid)
        return out


async def measure(args: argparse.Namespace) -> dict:
    sizes = args.sizes or ([100] if args.quick else [10, 100, 1000])
    cold_runs = args.runs or (3 if args.quick else 10)
    runs = args.runs or (3 if args.quick else 7)
    calls = 15 if args.quick else 50
    load_before = os.getloadavg()[0]
    emulator = EmulatorProcess()
    try:
        emulator.set_latency(args.latency_ms / 1e3)
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as workdir:
            bench = Bench(args, emulator, workdir)
            first = emulator.reseed(3)[0]
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                cold = await bench.cold_starts(cold_runs, first)
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                bare_call = await bench.bare_calls(calls)
            async with asyncio.timeout(PHASE_TIMEOUT_S * len(sizes)):
                fleet = await bench.fleet_calls(calls, runs, sizes)
    finally:
        emulator.close()
    result = {"latency_ms": args.latency_ms, **cold, "bare_tool_call_ms": bare_call, **fleet}
    result["targets"] = targets(result)
    result["quick"] = bool(args.quick)
    result["runs"] = {"cold_start": cold_runs, "calls": calls, "per_size": runs}
    result["machine"] = {**machine(), "loadavg_1min_before": round(load_before, 2),
                         "loadavg_1min_after": round(os.getloadavg()[0], 2)}
    return result


def targets(r: dict) -> dict:
    lists = r["list_agents"]
    requests = [v["coder_requests"] for v in lists.values()]
    flat = len(set(requests)) == 1 and not any(v["coder_requests_varied"] for v in lists.values())
    out = {
        "list_agents_requests": {"value": max(requests), "target": f"flat in fleet size and <= {MAX_LIST_REQUESTS}",
                                 "pass": flat and max(requests) <= MAX_LIST_REQUESTS},
        "cold_start_ratio": {"value": r["cold_start_ratio"], "target": f"<= {MAX_COLD_START_RATIO}",
                             "pass": r["cold_start_ratio"] <= MAX_COLD_START_RATIO},
        "rss_ratio": {"value": r["rss_ratio"], "target": f"<= {MAX_RSS_RATIO}",
                      "pass": r["rss_ratio"] <= MAX_RSS_RATIO},
        "tool_overhead_ms": {"value": r["tool_overhead_ms"], "target": f"<= {MAX_TOOL_OVERHEAD_MS}",
                             "pass": r["tool_overhead_ms"] <= MAX_TOOL_OVERHEAD_MS},
    }
    if "100" in lists:
        limit = LIST_LATENCIES_AT_100 * r["latency_ms"]
        out["list_agents_100_wall_ms"] = {"value": lists["100"]["wall_ms"], "target": f"<= {limit:g}",
                                          "pass": lists["100"]["wall_ms"] <= limit}
    return out


def machine() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    mem_kb = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem_kb = next((int(line.split()[1]) for line in f if line.startswith("MemTotal:")), 0)
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def table(r: dict) -> str:
    m, t = r["machine"], r["targets"]

    def verdict(name: str) -> str:
        return ("PASS" if t[name]["pass"] else "MISS") if name in t else ""

    rows = [
        ("injected latency per Coder / app-proxy request", f"{r['latency_ms']:g} ms", "", ""),
        ("cold start, spawn -> tools/list (fleet / bare)",
         f"{r['cold_start_ms']['fleet']:.0f} / {r['cold_start_ms']['bare']:.0f} ms = {r['cold_start_ratio']:.2f}x",
         t["cold_start_ratio"]["target"] + "x", verdict("cold_start_ratio")),
        ("  CPU time until tools/list (fleet / bare)",
         "{:.0f} / {:.0f} ms = {:.2f}x".format(r["cold_start_cpu_ms"]["fleet"], r["cold_start_cpu_ms"]["bare"],
                                               r["cold_start_cpu_ratio"]), "", ""),
        ("RSS after start-up + 3 calls (fleet / bare)",
         f"{r['rss_kb']['fleet'] / 1024:.1f} / {r['rss_kb']['bare'] / 1024:.1f} MiB = {r['rss_ratio']:.2f}x",
         t["rss_ratio"]["target"] + "x", verdict("rss_ratio")),
        ("tool overhead (show_agent wall - latency x requests)", f"{r['tool_overhead_ms']:.2f} ms",
         t["tool_overhead_ms"]["target"] + " ms", verdict("tool_overhead_ms")),
        ("  one such request straight to the emulator", f"{r['coder_request_ms']:.2f} ms", "", ""),
        ("  overhead less the emulator's own time", f"{r['tool_overhead_net_ms']:.2f} ms", "", ""),
        ("  bare server's trivial tool call (stdio)", f"{r['bare_tool_call_ms']:.2f} ms", "", ""),
        ("show_agent", f"{r['show_agent_wall_ms']:.1f} ms, {r['show_agent_coder_requests']} requests", "", ""),
        ("create_agent", f"{r['create_agent_wall_ms']:.1f} ms, {r['create_agent_coder_requests']} requests", "", ""),
    ]
    for size, v in r["list_agents"].items():
        target, mark = "", ""
        if size == "100" and "list_agents_100_wall_ms" in t:
            target, mark = t["list_agents_100_wall_ms"]["target"] + " ms", verdict("list_agents_100_wall_ms")
        value = f"{v['wall_ms']:.1f} ms, {v['coder_requests']} requests (the query alone: {v['coder_ms']:.1f} ms)"
        rows.append((f"list_agents, {size} agents", value, target, mark))
    rows.append(("list_agents Coder requests across sizes",
                 " / ".join(str(v["coder_requests"]) for v in r["list_agents"].values()),
                 t["list_agents_requests"]["target"], verdict("list_agents_requests")))
    widths = [max(len(row[i]) for row in rows + [("measure", "value", "target", "")]) for i in range(3)]
    title = (f"fleet-mcp benchmark, {m['date']}: {m['nproc']} x {m['cpu']}, {m['memory_gb']} GiB, "
             f"Python {m['python']}{' (quick)' if r['quick'] else ''}; load average "
             f"{m['loadavg_1min_before']:.2f} before, {m['loadavg_1min_after']:.2f} after")
    lines = [title, ""]
    for row in [("measure", "value", "target", "")] + rows:
        lines.append("  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    parser.add_argument("--quick", action="store_true", help="one fleet size (100) and few runs, for CI")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="injected latency per request (default 20)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                        help="fleet sizes for list_agents, e.g. 10,100,1000")
    parser.add_argument("--runs", type=int, help="runs per measure (default 10 cold starts, 7 otherwise; quick 3)")
    args = parser.parse_args(argv)
    if args.latency_ms < 0 or (args.sizes is not None and (not args.sizes or min(args.sizes) < 1)):
        parser.error("--latency-ms must be >= 0 and --sizes positive integers")
    result = asyncio.run(measure(args))
    print(json.dumps(result, separators=(",", ":")) if args.json else table(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
