"""Issue 24's figures on runner agents: show_agents of 20 with change summaries, and get_agent_result.

The stand-in answers the runner's app routes itself (`standin.runner_answer`: one finished turn that
changed files), the workspaces are the emulator's, of a template offering the runner's app.
"""

from __future__ import annotations

from coder import call
from measures import Bench, med, ms

SHOW_AGENTS = 20
SUMMARY = "3 files, +120 \u22128, 2 commits"  # what the stand-in's runners say in /state
GLANCE = {"current_task": "Benchmark agent", "latest_output": "Done: three modules changed, tests pass.",
          "changes_summary": SUMMARY, "last_turn": "succeeded"}  # also from their /state


async def runner_agents(bench: Bench, runs: int) -> dict:
    """show_agents of 20 runner agents: wall / latency; get_agent_result on one: its Coder requests, their
    routes, and its dependent round trips (wall / the round-trip latency, rounded)."""
    names = bench.coder.reseed(SHOW_AGENTS, runner=True)
    bench.coder.record()
    session = await bench.fleet()
    await call(session, "show_agents", agent_names=names)
    await call(session, "get_agent_result", agent_name=names[0])

    bench.coder.replay(bench.latency_ms)
    walls, asked = [], []
    for _ in range(runs):
        wall, stats, answer = await bench.timed(session, "show_agents", agent_names=names)
        bench.misses(stats)
        glances = {a["name"]: {k: a.get(k) for k in GLANCE} for a in answer["agents"]}
        if glances != dict.fromkeys(names, GLANCE):
            raise RuntimeError(f"show_agents answered other glances: {str(glances)[:300]}")
        walls.append(wall)
        asked.append(stats["requests"])
    results = []
    for _ in range(runs):
        wall, stats, answer = await bench.timed(session, "get_agent_result", agent_name=names[0])
        bench.misses(stats)
        if answer.get("driver") != "runner" or (answer.get("changes") or {}).get("files_total") != 3:
            raise RuntimeError(f"get_agent_result answered no runner's changes: {str(answer)[:300]}")
        results.append((wall, stats))

    rt_latency = bench.args.round_trip_latency_ms
    bench.coder.replay(rt_latency)
    rt_held = []  # Coder's hold of the call's requests, as show_agent's round trips are counted
    for _ in range(runs):
        _, stats, _ = await bench.timed(session, "get_agent_result", agent_name=names[0])
        bench.misses(stats)
        rt_held.append(stats["busy_ms"])
    return {"show_agents_20_runner_latencies": round(med(walls) * 1e3 / bench.latency_ms, 2),
            "show_agents_20_runner_wall_ms": ms(med(walls)),
            "show_agents_20_runner_requests": int(med(asked)),
            "get_agent_result_wall_ms": ms(med(w for w, _ in results)),
            "get_agent_result_requests": int(med(s["requests"] for _, s in results)),
            "get_agent_result_routes": results[-1][1]["routes"],
            "get_agent_result_round_trips": round(med(rt_held) / rt_latency)}
