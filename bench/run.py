#!/usr/bin/env python
"""Benchmark fleet-mcp against a stand-in Coder that costs ~nothing, with a fixed injected latency.

    python bench/run.py                  # the table (fleet sizes 10, 100, 1000)
    python bench/run.py --json           # one JSON object on one line
    python bench/run.py --quick          # fleet sizes 10 and 100, few runs
    python bench/run.py --breakdowns     # and where the overhead and the server CPU go (overhead.py, http_cpu.py)
    python bench/run.py --smoke --breakdowns --json   # every figure at the fewest calls (the test; no measurement)
    python bench/run.py --latency-ms 20 --round-trip-latency-ms 100 --sizes 10,100 --runs 5
    python bench/run.py --changes        # only the runner's change summary on a 10,000-file repository
    python bench/run.py --real-sized     # only list, server CPU and wait on lean vs real-sized answers

A `fleet-mcp emulator` process (real time) is the truth; `bench/standin.py` stands between it and
the fleet server: it records the emulator's answers to the calls a phase makes, then serves them
again from a dict after `--latency-ms` each, counting requests and the time it held them. The fleet
server runs as `fleet-mcp` (stdio: one process for every stdio phase, or HTTP for the CPU figures)
pointed at the stand-in, driven by the official `mcp` SDK client; the references are bare FastMCP servers
started the same way: one with one trivial tool, and the floors (issue 33), which ask Coder what the fleet
asks through httpx and answer the fleet's recorded answer. The bench process imports neither fleet_mcp nor
the emulator. Figures (targets in TARGETS):

- tool_overhead_ms: median of show_agent's wall time minus the time the stand-in held its requests
  (at least one in its hands): latency x requests when they are sequential, less when concurrent;
  tool_overhead_at_0_ms: the same with no injected latency (the server never waits idle);
  tool_overhead_ratio: tool_overhead_ms over its floor's, floors.bare_requests (bench/overhead.py's server
  asking show_agent's requests, measured the same way); show_agent_cpu_ms: the server's CPU per call.
- show_agent_latencies (wall / latency), show_agent_requests, show_agent_round_trips (dependent
  round trips: the time the stand-in held the call's requests / --round-trip-latency-ms, rounded, which
  the machine's load does not stretch as it does the wall time), create_agent_requests (warm caches), and
  the requests each made (show_agent_routes, create_agent_routes).
- server_cpu_ms_per_call over streamable HTTP: the fleet's list_agents (10 agents), its floor
  (bare_listing: bench/http_cpu.py's server asking the same listing) and the bare server's echo, from
  /proc/<pid>/stat before and after N calls; server_cpu_ratio: the fleet's over the floor's (floors.bare_listing).
- with --breakdowns, `overhead` and `http_cpu`: every server of bench/overhead.py (at the injected latency;
  its fleet and bare_echo rows are show_agent's and the bare waiting call's above) and bench/http_cpu.py.
- cold_start_ratio (spawn -> tools/list), rss_ratio (after three calls): fleet over bare, medians
  of alternating runs; the fleet's start-up includes its Coder checks at the injected latency.
- list_agents per fleet size: wall, Coder requests, the fleet's own time (overhead_ms), the CPU per call of
  the server and of the bench's `mcp` client (server_cpu_ms, client_cpu_ms: the client's share of the wall).
- with --real-sized, `listing`: bench/listing.py's figures (list_agents' own CPU on a real-sized listing of the
  largest size, socket to `AgentList`, target <= 150 ms; beside its floor, part by part).
- Issue 13 (n/a until the server lists the tool): wait_requests_per_poll, wait_first_progress_s and
  wait_seen_after_s and wait_answer_delay_s (wait_for_agents over 100 agents; the last two: how long after
  one agent stops, in the stand-in's answers, a poll reads it and the wait answers, worst of three moments
  in a poll interval; the answer follows its poll by one listing's round trip), show_agents_20_latencies.
- Issue 24: change_summary_ms, the runner's summary of a task's changes after a turn (its end point and
  the task's and the agent's summaries) in a repository of 10,000 files with 100 changed: git's own speed,
  measured by bench/changes.py in a process of its own (median of the runs; change_start_ms: the start point).
  On runner agents (bench/runner_agents.py; the stand-in answers their app routes as `fleet-mcp runner` would after a
  turn that changed files): show_agents_20_runner_latencies (show_agents of 20 with change summaries, wall /
  latency; show_agents_20_runner_requests: its Coder requests), get_agent_result_requests and _routes,
  get_agent_result_round_trips (dependent round trips, counted as show_agent's: the workspace lookup and one
  to the agent make 2).
- standin_cost_ms (one answer's round trip at no latency, raw socket client) and
  standin_latency_error_ms (how much longer than the latency it held a request): the instrument's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/processes.py: the process helpers

from coder import ERAS, coder, real_listing
from measures import Bench
from runner_agents import runner_agents

PHASE_TIMEOUT_S = 300.0
CHANGES = Path(__file__).resolve().parent / "changes.py"
LISTING = CHANGES.with_name("listing.py")
LISTING_TARGET_MS = 150  # issue 30.7: list_agents of 1,000 real-sized workspaces

# (figure, limit, unit, where the target comes from); a figure of None (tool not there yet) is n/a.
TARGETS = [
    ("show_agent_latencies", 2.5, "x latency", "issue 11"),
    ("create_agent_requests", 2, "requests", "issue 11"),
    # issue 11's 3 ms sat below what waiting costs any server here; then a bare echo (issue 21): now the floor,
    # a bare FastMCP server doing the same Coder requests through httpx
    ("tool_overhead_ratio", 1.25, "x its floor, bare_requests", "issue 33"),
    ("server_cpu_ratio", 1.25, "x its floor, bare_listing", "issue 33"),
    ("cold_start_ratio", 1.1, "x bare", "issue 11"),
    ("rss_ratio", 1.15, "x bare", "issue 11"),
    ("wait_requests_per_poll", 1, "requests", "issue 13"),
    ("wait_first_progress_s", 10, "s", "issue 13"),
    ("wait_seen_after_s", 2.0, "s (one poll interval)", "issue 13"),
    ("show_agents_20_latencies", 3.0, "x latency", "issue 13"),
    ("change_summary_ms", 300, "ms", "issue 24"),
    ("show_agents_20_runner_latencies", 2.0, "x latency", "issue 24"),
    # one round trip to the agent after the workspace lookup
    ("get_agent_result_round_trips", 2, "dependent round trips", "issue 24"),
]
NEEDS = {"wait_requests_per_poll": "wait_for_agents", "wait_first_progress_s": "wait_for_agents",
         "wait_seen_after_s": "wait_for_agents",
         "show_agents_20_latencies": "show_agents"}  # figure -> the tool it needs
FLOORS = {"tool_overhead_ratio": "bare_requests", "server_cpu_ratio": "bare_listing"}  # ratio -> its floor
MAX_LIST_REQUESTS = 3
SMOKE_FILES = 200  # --smoke: the change summary's repository (git's speed is not measured, only that it runs)
LIST_LATENCIES_AT_100 = 4


async def measure(args: argparse.Namespace) -> dict:
    sizes = args.sizes or ([10, 100] if args.quick else [10, 100, 1000])
    cold_runs = args.runs or (1 if args.smoke else 2 if args.quick else 10)
    runs = args.runs or (1 if args.smoke else 3 if args.quick else 7)
    calls = 5 if args.smoke else 15 if args.quick else 50
    # /proc counts CPU in 10 ms ticks: 50 calls read 0.2 ms steps; 30 still read a few ticks of a bare echo
    cpu_calls = 30 if args.smoke else 150 if args.quick else 300
    load_before = os.getloadavg()[0]
    with coder() as stand_in, tempfile.TemporaryDirectory(prefix="fleet-bench-") as workdir:
        bench = Bench(args, stand_in, workdir)
        result: dict = {"latency_ms": args.latency_ms, "round_trip_latency_ms": args.round_trip_latency_ms}
        if args.real_sized:
            if real_listing() is None:
                raise SystemExit("--real-sized needs the recorded listing: ../shared/reference or "
                                 "FLEET_MCP_REFERENCE_DIR")
            sizes = args.sizes or ([10, 100] if args.quick else [10, 1000])
            try:
                async with asyncio.timeout(PHASE_TIMEOUT_S * 3):
                    result.update(await bench.real_sized(sizes, runs, cpu_calls))
            finally:
                await bench.close()
            result["listing"] = listing(max(sizes), max(runs, 3 if args.quick else 15))
            result["machine"] = {**machine(), "loadavg_1min_before": round(load_before, 2),
                                 "loadavg_1min_after": round(os.getloadavg()[0], 2)}
            result["quick"] = bool(args.quick)
            return result
        # the floors right after `calls`: they ask what its show_agent calls asked, before any reseed
        phases = {"calls": lambda: bench.calls(calls, runs),
                  "overhead_floor": lambda: bench.overhead_floor(calls, args.breakdowns),
                  "cold_starts": lambda: bench.cold_starts(cold_runs, calls),
                  "server_cpu": lambda: bench.server_cpu(cpu_calls, args.breakdowns),
                  "list_sizes": lambda: bench.list_sizes(sizes, runs), "issue_13": lambda: bench.issue_13(runs),
                  "runner_agents": lambda: runner_agents(bench, runs),
                  "changes": lambda: changes(runs, SMOKE_FILES if args.smoke else None)}
        result["phase_s"] = {}
        try:
            for name, phase in phases.items():
                t0 = time.perf_counter()
                async with asyncio.timeout(PHASE_TIMEOUT_S):
                    result.update(await phase())
                result["phase_s"][name] = round(time.perf_counter() - t0, 1)
        finally:
            await bench.close()
    result["runs"] = {"cold_start": cold_runs, "calls": calls, "per_measure": runs, "cpu_calls": cpu_calls}
    floors(result, args.breakdowns)
    result["targets"] = targets(result)
    result["quick"], result["smoke"] = bool(args.quick), bool(args.smoke)
    result["machine"] = {**machine(), "loadavg_1min_before": round(load_before, 2),
                         "loadavg_1min_after": round(os.getloadavg()[0], 2)}
    return result


def listing(agents: int, runs: int) -> dict:
    """bench/listing.py's figures (in a process of its own, no server around it): list_agents' own CPU on a
    real-sized listing of `agents`, socket to `AgentList`, beside its floor, part by part."""
    done = subprocess.run([sys.executable, str(LISTING), "--agents", str(agents), "--runs", str(runs)],
                          capture_output=True, text=True, timeout=PHASE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench/listing.py failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def floors(r: dict, breakdowns: bool) -> None:
    """Each floor beside the figures, the ratios to them; with `breakdowns`, overhead.py's five rows."""
    cpu = r["server_cpu_ms_per_call"]
    r["floors"]["bare_listing"] = {era: cpu["bare_listing" + suffix] for era, suffix in ERAS.items()}
    floor = r["floors"]["bare_requests"]["overhead_ms"]
    r["tool_overhead_ratio"] = round(r["tool_overhead_ms"] / floor, 2) if floor > 0 else None
    if breakdowns:
        r["overhead"] = {
            "latency_ms": r["latency_ms"], "calls": r["runs"]["calls"],
            "bare_echo": {"cpu_ms": r["bare_waiting_call_cpu_ms"], "overhead_ms": r["bare_waiting_call_ms"],
                          "requests_per_call": 0.0},
            "bare_answer": r["overhead"]["bare_answer"], "bare_requests": r["floors"]["bare_requests"],
            "fleet_from_memory": r["overhead"]["fleet_from_memory"],
            "fleet": {"cpu_ms": r["show_agent_cpu_ms"], "overhead_ms": r["tool_overhead_ms"],
                      "requests_per_call": float(r["show_agent_requests"])}}


async def changes(runs: int, files: int | None = None) -> dict:
    """bench/changes.py's figures (a process of its own: this one imports no fleet_mcp)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, str(CHANGES), "--runs", str(runs),
                                                *(["--files", str(files)] if files else []),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench/changes.py failed: {(out + err).decode(errors='replace')[-2000:]}")
    return json.loads(out)


def targets(r: dict) -> dict:
    out = {}
    for name, limit, unit, source in TARGETS:
        if name not in r:  # a phase not run (--changes runs one)
            continue
        value = r.get(name)
        missing = NEEDS.get(name) in r.get("tools_missing", [])
        out[name] = {"value": value, "target": f"<= {limit:g} {unit}", "source": source,
                     "pass": None if missing else value is not None and value <= limit}
        if name in FLOORS:
            out[name]["floor"] = {"name": FLOORS[name], "value": r["floors"][FLOORS[name]]}
    lists = r.get("list_agents")
    if lists is None:
        return out
    requests = [v["coder_requests"] for v in lists.values()]
    flat = len(set(requests)) == 1 and not any(v["coder_requests_varied"] for v in lists.values())
    out["list_agents_requests"] = {"value": max(requests), "target": f"flat in fleet size, <= {MAX_LIST_REQUESTS}",
                                   "source": "issue 5", "pass": flat and max(requests) <= MAX_LIST_REQUESTS}
    if "100" in lists:
        limit = LIST_LATENCIES_AT_100 * r["latency_ms"]
        out["list_agents_100_wall_ms"] = {"value": lists["100"]["wall_ms"], "target": f"<= {limit:g} ms",
                                          "source": "issue 5", "pass": lists["100"]["wall_ms"] <= limit}
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


def changes_row(r: dict, row) -> tuple[str, str, str, str]:
    return row(f"runner change summary, {r['change_repo_files']:,} files, {r['change_changed']} changed",
               f"{r['change_summary_ms']} ms (max {r['change_summary_max_ms']}); start point "
               f"{r['change_start_ms']} ms", "change_summary_ms")


def changes_table(r: dict) -> str:
    t = r["targets"]["change_summary_ms"]
    verdict = {True: "PASS", False: "MISS"}[t["pass"]]
    return "  ".join(changes_row(r, lambda label, value, name: (label, value, t["target"], verdict)))


def table(r: dict) -> str:
    m, t = r["machine"], r["targets"]

    def na(value, fmt: str = "{}") -> str:
        return "n/a" if value is None else fmt.format(value)

    def row(label: str, value: str, name: str = "") -> tuple[str, str, str, str]:
        if name not in t:
            return label, value, "", ""
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[t[name]["pass"]]
        return label, value, t[name]["target"], verdict

    cpu, cold, mem = r["server_cpu_ms_per_call"], r["cold_start_ms"], r["rss_kb"]
    floor = r["floors"]["bare_requests"]
    rows = [
        row("injected latency per Coder request", f"{r['latency_ms']:g} ms"),
        row("the stand-in's own cost per request", f"{r['standin_cost_ms']:.3f} ms round trip at no latency; "
            f"holds {r['standin_latency_error_ms']:+.2f} ms beyond the latency"),
        row("tool overhead (show_agent wall - Coder's hold)", f"{r['tool_overhead_ms']:.2f} ms; server CPU "
            f"{r['show_agent_cpu_ms']:.2f} ms a call"),
        row("  over its floor: bare FastMCP asking the same (httpx)",
            f"{floor['overhead_ms']:.2f} ms (CPU {floor['cpu_ms']:.2f} ms a call) = "
            + na(r["tool_overhead_ratio"], "{:.2f}x"), "tool_overhead_ratio"),
        row("  the same with Coder answering at once", f"{r['tool_overhead_at_0_ms']:.2f} ms"),
        row("  bare server's trivial call (stdio)", f"{r['bare_tool_call_ms']:.2f} ms; waiting idle "
            f"{r['latency_ms']:g} ms first: {r['bare_waiting_call_ms']:.2f} ms beyond the wait"),
        row("show_agent wall / latency", f"{r['show_agent_wall_ms']:.1f} ms = {r['show_agent_latencies']:.2f}x",
            "show_agent_latencies"),
        row("show_agent Coder requests, dependent round trips",
            f"{r['show_agent_requests']}, {r['show_agent_round_trips']} (at {r['round_trip_latency_ms']:g} ms)"),
        row("create_agent Coder requests (warm)", f"{r['create_agent_requests']} ({r['create_agent_wall_ms']:.1f} ms)",
            "create_agent_requests"),
        row("server CPU per call over HTTP (list_agents 10 / floor / echo)",
            f"{cpu['fleet_list_agents']:.2f} / {cpu['bare_listing']:.2f} / {cpu['bare_echo']:.2f} ms; 2026-07-28 era "
            f"{cpu['fleet_list_agents_2026']:.2f} / {cpu['bare_listing_2026']:.2f} / {cpu['bare_echo_2026']:.2f} ms",
            ""),
        row("  over its floor: bare FastMCP asking the same listing (httpx)",
            na(r["server_cpu_ratio"], "{:.2f}x (the worse era)"), "server_cpu_ratio"),
        row("cold start, spawn -> tools/list (fleet / bare)",
            f"{cold['fleet']:.0f} / {cold['bare']:.0f} ms = {r['cold_start_ratio']:.2f}x", "cold_start_ratio"),
        row("  CPU time until tools/list (fleet / bare)", "{:.0f} / {:.0f} ms = {:.2f}x".format(
            r["cold_start_cpu_ms"]["fleet"], r["cold_start_cpu_ms"]["bare"], r["cold_start_cpu_ratio"])),
        row("RSS after start-up + 3 calls (fleet / bare)",
            f"{mem['fleet'] / 1024:.1f} / {mem['bare'] / 1024:.1f} MiB = {r['rss_ratio']:.2f}x", "rss_ratio"),
    ]
    for size, v in r["list_agents"].items():
        rows.append(row(f"list_agents, {size} agents", f"{v['wall_ms']:.1f} ms, {v['coder_requests']} requests, "
                        f"own time {v['overhead_ms']:.1f} ms", "list_agents_100_wall_ms" if size == "100" else ""))
    rows.append(row("list_agents Coder requests across sizes",
                    " / ".join(str(v["coder_requests"]) for v in r["list_agents"].values()), "list_agents_requests"))
    rows += [
        row("wait_for_agents, 100 agents: requests per poll",
            na(r["wait_requests_per_poll"], "{} ({} polls)".format("{}", r["wait_polls"])), "wait_requests_per_poll"),
        row("wait_for_agents: first progress", na(r["wait_first_progress_s"], "{} s"), "wait_first_progress_s"),
        row("wait_for_agents: condition read by a poll after (worst)",
            na(r["wait_seen_after_s"], "{} s (" + ", ".join(f"{d} s" for d in r.get("wait_seen_after_all_s", []))
               + "; poll interval 2 s)"), "wait_seen_after_s"),
        row("  and answered after",
            na(r["wait_answer_delay_s"], "{} s (" + ", ".join(f"{d} s" for d in r.get("wait_answer_delays_s", []))
               + ")")),
        row("show_agents, 20 agents, wall / latency", na(r["show_agents_20_latencies"], "{}x"),
            "show_agents_20_latencies"),
        row("show_agents, 20 runner agents with change summaries, wall / latency",
            f"{r['show_agents_20_runner_wall_ms']:.1f} ms = {r['show_agents_20_runner_latencies']}x, "
            f"{r['show_agents_20_runner_requests']} requests",
            "show_agents_20_runner_latencies"),
        row("get_agent_result, runner agent: Coder requests, dependent round trips",
            f"{r['get_agent_result_requests']} ({r['get_agent_result_wall_ms']:.1f} ms), "
            f"{r['get_agent_result_round_trips']} (at {r['round_trip_latency_ms']:g} ms)",
            "get_agent_result_round_trips"),
        changes_row(r, row),
    ]
    header = ("measure", "value", "target", "")
    widths = [max(len(x[i]) for x in [*rows, header]) for i in range(3)]
    kind = " (smoke: no measurement)" if r["smoke"] else " (quick)" if r["quick"] else ""
    title = (f"fleet-mcp benchmark, {m['date']}: {m['nproc']} x {m['cpu']}, {m['memory_gb']} GiB, "
             f"Python {m['python']}{kind}; load average "
             f"{m['loadavg_1min_before']:.2f} before, {m['loadavg_1min_after']:.2f} after")
    lines = [title, ""]
    for cells in [header, *rows]:
        lines.append("  ".join(c.ljust(widths[i]) if i < 3 else c for i, c in enumerate(cells)).rstrip())
    for tool in ("show_agent", "create_agent", "get_agent_result"):
        lines.append(f"\n{tool}'s Coder requests, in order:\n  " + "\n  ".join(r[f"{tool}_routes"]))
    if "overhead" in r:
        lines.append(f"\nwhere the overhead goes (bench/overhead.py's servers, stdio, latency {r['latency_ms']:g} ms):")
        lines += [f"  {label:20s} CPU {f['cpu_ms']:6.3f} ms/call  overhead {f['overhead_ms']:6.3f} ms  "
                  f"Coder requests {f['requests_per_call']:g}/call"
                  for label, f in r["overhead"].items() if isinstance(f, dict)]
    if "http_cpu" in r:
        lines.append("\nwhere the server CPU goes (bench/http_cpu.py's servers, ms per call, each protocol era):")
        lines += [f"  {label:28s} " + " / ".join(f"{ms:.3f}" for ms in f.values())
                  for label, f in r["http_cpu"].items() if isinstance(f, dict)]
    if r["tools_missing"]:
        lines.append(f"\nn/a: the server does not list {', '.join(r['tools_missing'])} yet")
    for tool, error in r["errors"].items():
        lines.append(f"{tool} failed: {error}")
    return "\n".join(lines)


def real_table(r: dict) -> str:
    """The lean and real-sized figures side by side, with issue 21's targets where it sets them."""
    m, lean, real = r["machine"], r["real_sized"]["lean"], r["real_sized"]["real"]
    lines = [f"fleet-mcp benchmark, real-sized answers, {m['date']}: {m['nproc']} x {m['cpu']}, Python {m['python']}"
             f"; load average {m['loadavg_1min_before']:.2f} before, {m['loadavg_1min_after']:.2f} after",
             f"workspace answer: real-sized {real['workspace_bytes']} bytes each (median); latency "
             f"{r['latency_ms']:g} ms", "", f"{'measure':<52}{'lean':>14}{'real-sized':>14}  target"]

    def row(label: str, a, b, target: str = "") -> None:
        lines.append(f"{label:<52}{a:>14}{b:>14}  {target}".rstrip())

    for size in lean["list_agents"]:
        lw, rw = lean["list_agents"][size], real["list_agents"][size]
        row(f"list_agents, {size} agents: wall ms", f"{lw['wall_ms']:.1f}", f"{rw['wall_ms']:.1f}",
            "<= 300 ms (issue 21)" if size == "1000" else "")
        row("  own time ms (wall - Coder's hold)", f"{lw['overhead_ms']:.1f}", f"{rw['overhead_ms']:.1f}")
        row("  server CPU ms per call", f"{lw['server_cpu_ms']:.1f}", f"{rw['server_cpu_ms']:.1f}")
        row("  client CPU ms per call (mcp SDK: read, schema check)", f"{lw['client_cpu_ms']:.1f}",
            f"{rw['client_cpu_ms']:.1f}")
    lc, rc = lean["server_cpu_ms_per_call"], real["server_cpu_ms_per_call"]
    row("server CPU per list_agents (10) over HTTP, ms", f"{lc['fleet_list_agents']:.2f}",
        f"{rc['fleet_list_agents']:.2f}")
    row("  bare FastMCP echo, ms", f"{lc['bare_echo']:.2f}", f"{rc['bare_echo']:.2f}")
    row("  ratio (worse protocol era)", f"{lean['server_cpu_ratio']:.2f}x", f"{real['server_cpu_ratio']:.2f}x",
        "<= 2.5 x bare (issue 21)")
    if (f := r.get("listing")) is not None:
        row(f"list_agents {f['agents']}, own CPU ms: median (min)", "",
            f"{f['list_agents_ms']:.0f} ({f['list_agents_min_ms']:.0f})",
            f"<= {LISTING_TARGET_MS} ms (issue 30.7)  {'PASS' if f['list_agents_ms'] <= LISTING_TARGET_MS else 'MISS'}")
        row("  socket -> AgentList, in-process (bench/listing.py)", "", "")
        row("  floor: bare httpx GET + the same decode, ms", "", f"{f['floor_ms']:.0f} ({f['floor_min_ms']:.0f})")
        row("  list_agents over its floor (median of pairs)", "", f"{f['list_agents_over_floor']:.2f}x")
        row("  read / decode / summaries / drop, ms median", "",
            f"{f['read_ms']:.0f}/{f['decode_ms']:.0f}/{f['summaries_ms']:.0f}/{f['drop_ms']:.0f}")
    row("wait_for_agents over 100: requests per poll", lean["wait_requests_per_poll"], real["wait_requests_per_poll"])
    row("  first progress, s", lean["wait_first_progress_s"], real["wait_first_progress_s"])
    row("  a change read by a poll after, s (worst)", lean["wait_seen_after_s"], real["wait_seen_after_s"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    parser.add_argument("--quick", action="store_true", help="fleet sizes 10 and 100, few runs (~30 s)")
    parser.add_argument("--smoke", action="store_true",
                        help="--quick at the fewest calls and runs that print every figure (the suite's check that "
                             "the benchmark runs: its figures are no measurement)")
    parser.add_argument("--breakdowns", action="store_true",
                        help="also every server of bench/overhead.py and bench/http_cpu.py (where the overhead and "
                             "the server CPU go), in this run")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="injected latency per request (default 20)")
    parser.add_argument("--round-trip-latency-ms", type=float, default=100.0,
                        help="latency while counting show_agent's dependent round trips (default 100)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                        help="fleet sizes for list_agents, e.g. 10,100,1000")
    parser.add_argument("--real-sized", action="store_true",
                        help="only list_agents, server CPU and wait_for_agents, on lean and on real-sized answers")
    parser.add_argument("--runs", type=int, help="runs per measure (default 10 cold starts, 7 otherwise; quick 2/3)")
    parser.add_argument("--changes", action="store_true", help="only the runner's change summary (issue 24)")
    args = parser.parse_args(argv)
    args.quick = args.quick or args.smoke
    if args.latency_ms <= 0 or args.round_trip_latency_ms <= 0 or (
            args.sizes is not None and (not args.sizes or min(args.sizes) < 1)) or (args.runs is not None and
                                                                                    args.runs < 1):
        parser.error("--latency-ms and --round-trip-latency-ms must be > 0, --sizes and --runs positive integers")
    if args.changes:
        result = asyncio.run(changes(args.runs or 7))
        result["targets"] = targets(result)
        print(json.dumps(result, separators=(",", ":")) if args.json else changes_table(result), flush=True)
        return 0
    result = asyncio.run(measure(args))
    shown = real_table(result) if args.real_sized else table(result)
    print(json.dumps(result, separators=(",", ":")) if args.json else shown, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
