#!/usr/bin/env python
"""Where show_agent's overhead goes (issue 21): CPU and overhead per call of five stdio servers, against the
bench's stand-in Coder (`bench/coder.py`), each driven by the mcp SDK's `ClientSession`.

    python bench/overhead.py                 # the table, 300 calls each, Coder answering at once
    python bench/overhead.py --calls 1000 --latency-ms 20 --json

- bare_echo: a bare FastMCP server's `echo` (`coder.BARE_SERVER`, the reference of `tool_overhead_ratio`);
- bare_answer: a bare FastMCP server whose `show_agent` answers show_agent's recorded answer (a `ShownAgent`,
  structured output) from a service injected by `Depends`: FastMCP's own cost of what show_agent uses;
- bare_requests: bare_answer's process, its `show_agent_asking`: each call first asks the stand-in show_agent's
  own 3 requests at once with a plain `httpx.AsyncClient` (its defaults, kept connections) and decodes their
  JSON: the floor of any FastMCP server that asks Coder what show_agent asks, through httpx, before any work
  on the answers;
- fleet_from_memory: `fleet-mcp` with `Fleet.show` answering each agent's first answer again: the fleet's tool
  path (registry wrapper, errors, middleware, the stdio gate) without a Coder request;
- fleet: `fleet-mcp`, show_agent (3 Coder requests in 1 round trip).

CPU per call from /proc/<pid>/stat over the measured calls; overhead: median wall time minus the time the
stand-in held the call's requests (bare_echo: minus its own idle wait, as `measures.bare_calls`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/processes.py: the process helpers

from coder import BARE_SERVER, Coder, call, coder, stdio_session
from http_cpu import processes
from mcp import ClientSession

from tests.processes import clean_env, cpu_seconds, fleet_command

ANSWER_SERVER = textwrap.dedent('''\
    import asyncio
    import json
    import os

    import httpx
    from fastmcp import Context, FastMCP
    from fastmcp.dependencies import CurrentContext, Depends

    from fleet_mcp.models import ShownAgent

    ANSWERS = {name: ShownAgent.model_validate(a) for name, a in json.loads(os.environ["ANSWERS"]).items()}
    ROUTES = json.loads(os.environ["ROUTES"])
    CODER = httpx.AsyncClient(base_url=os.environ["CODER_URL"],
                              headers={"Coder-Session-Token": os.environ["CODER_SESSION_TOKEN"]})
    mcp = FastMCP("bare-answer")


    class Shows:
        async def show(self, name: str) -> ShownAgent:
            return ANSWERS[name]

        async def asking(self, name: str) -> ShownAgent:
            for answer in await asyncio.gather(*(CODER.get(path) for path in ROUTES[name])):
                answer.raise_for_status()
                answer.json()
            return ANSWERS[name]


    def shows_of(ctx: Context = CurrentContext()) -> Shows:
        return Shows()


    @mcp.tool
    async def show_agent(agent_name: str, shows: Shows = Depends(shows_of)) -> ShownAgent:
        """show_agent's recorded answer."""
        return await shows.show(agent_name)


    @mcp.tool
    async def show_agent_asking(agent_name: str, shows: Shows = Depends(shows_of)) -> ShownAgent:
        """show_agent's requests asked at once, their JSON decoded; then show_agent's recorded answer."""
        return await shows.asking(agent_name)


    if __name__ == "__main__":
        mcp.run(transport="stdio", show_banner=False)
    ''')
FROM_MEMORY = textwrap.dedent('''\
    import sys

    from fleet_mcp.cli import main
    from fleet_mcp.fleet.agents import Fleet

    asked = Fleet.show
    answers = {}


    async def show(self, name, **options):
        if name not in answers:
            answers[name] = await asked(self, name, **options)
        return answers[name]


    Fleet.show = show
    sys.exit(main())
    ''')
WARM = 20
SERVERS = ("bare_echo", "bare_answer", "bare_requests", "fleet_from_memory", "fleet")


async def measured(stand_in: Coder, session: ClientSession, pid: int, tool: str, arguments: list[dict], calls: int,
                   latency_ms: float, names: list[str], warm: int = WARM) -> dict:
    """CPU ms per call and median overhead ms of `calls` calls (after `warm`), the stand-in at `latency_ms`."""
    stand_in.replay(0)
    for name in names:  # the answers from memory are made here, with the stand-in still replaying at once
        await call(session, tool, agent_name=name)
    stand_in.replay(latency_ms)
    for i in range(warm):
        await call(session, tool, **arguments[i % len(arguments)])
    before, overheads, asked, missed = cpu_seconds(pid), [], 0, []
    for i in range(calls):
        stand_in.clear()
        t0 = time.perf_counter()
        answer = await call(session, tool, **arguments[i % len(arguments)])
        wall = time.perf_counter() - t0
        stats = stand_in.stats()
        held, asked, missed = stats["busy_ms"] / 1e3, asked + stats["requests"], missed + stats["misses"]
        waited = float(answer["result"]) if tool == "echo" and latency_ms else 0.0
        overheads.append(wall - held - waited)
    cpu = (cpu_seconds(pid) - before) / calls
    if missed:
        raise RuntimeError(f"{tool} asked what the stand-in never recorded: {missed[:3]}")
    return {"cpu_ms": round(cpu * 1e3, 3), "overhead_ms": round(statistics.median(overheads) * 1e3, 3),
            "requests_per_call": round(asked / calls, 2)}


def servers(workdir: str, fleet_env: dict[str, str], answers: dict[str, dict], routes: dict[str, list[str]],
            latency_ms: float) -> dict[str, tuple]:
    """Each server's (command, env, tool, arguments), its scripts written into `workdir`: `answers` are
    show_agent's for each agent, `routes` the paths it asked Coder for each."""
    scripts = {}
    for name, text in (("bare.py", BARE_SERVER), ("answer.py", ANSWER_SERVER), ("memory.py", FROM_MEMORY)):
        scripts[name] = [sys.executable, str(Path(workdir, name))]
        Path(workdir, name).write_text(text)
    shows = [{"agent_name": name} for name in answers]
    answering = {**fleet_env, "ANSWERS": json.dumps(answers), "ROUTES": json.dumps(routes)}
    return {
        "bare_echo": (scripts["bare.py"], clean_env(), "echo", [{"text": "hi", "wait_ms": latency_ms}]),
        "bare_answer": (scripts["answer.py"], answering, "show_agent", shows),
        "bare_requests": (scripts["answer.py"], answering, "show_agent_asking", shows),
        "fleet_from_memory": (scripts["memory.py"], fleet_env, "show_agent", shows),
        "fleet": (fleet_command(), fleet_env, "show_agent", shows),
    }


async def breakdown(stand_in: Coder, workdir: str, answers: dict[str, dict], routes: dict[str, list[str]],
                    calls: int, latency_ms: float, labels=SERVERS, warm: int = WARM) -> dict[str, dict]:
    """Each server in `labels` measured (`measured`), show_agent's answers for `answers`' agents recorded."""
    chosen = servers(workdir, clean_env(CODER_URL=stand_in.url, CODER_SESSION_TOKEN=stand_in.token), answers,
                     routes, latency_ms)
    out = {}
    for command, env, group in processes(chosen, labels):
        async with stdio_session(command, env, workdir) as (session, pid):
            await session.initialize()
            for label in group:
                _, _, tool, arguments = chosen[label]
                out[label] = await measured(stand_in, session, pid, tool, arguments, calls, latency_ms,
                                            list(answers) if tool.startswith("show_agent") else [], warm)
    return out


async def measure(args: argparse.Namespace) -> dict:
    with coder() as stand_in, tempfile.TemporaryDirectory(prefix="fleet-overhead-") as workdir:
        names = stand_in.reseed(10)
        stand_in.record()
        fleet_env = clean_env(CODER_URL=stand_in.url, CODER_SESSION_TOKEN=stand_in.token)
        async with stdio_session(fleet_command(), fleet_env, workdir) as (session, _):
            await session.initialize()
            answers = {name: await call(session, "show_agent", agent_name=name) for name in names}
            stand_in.replay(0)
            routes = {}
            for name in names:  # what each show_agent asks, for bare_requests to ask the same
                stand_in.clear()
                await call(session, "show_agent", agent_name=name)
                routes[name] = [r.split(" ", 1)[1] for r in stand_in.stats()["routes"]]
        out: dict = {"latency_ms": args.latency_ms, "calls": args.calls,
                     **await breakdown(stand_in, workdir, answers, routes, args.calls, args.latency_ms)}
    # tool_overhead_ratio as bench/run.py made it before issue 33, for the fleet and for its floor
    for label in ("bare_requests", "fleet"):
        out[label]["ratio_to_bare_echo"] = round(out[label]["overhead_ms"] / out["bare_echo"]["overhead_ms"], 2)
    out["fleet"]["ratio_to_bare_requests"] = round(out["fleet"]["overhead_ms"] / out["bare_requests"]["overhead_ms"],
                                                   2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="measured calls per server (after 20 to warm)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the stand-in's injected latency per request")
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.calls} calls each over stdio, Coder's latency {args.latency_ms:g} ms")
    for label in SERVERS:
        f = figures[label]
        print(f"{label:20s} CPU {f['cpu_ms']:6.3f} ms/call   overhead {f['overhead_ms']:6.3f} ms   "
              f"Coder requests {f['requests_per_call']:g}/call"
              + (f"   {f['ratio_to_bare_echo']:.2f}x bare_echo's overhead" if "ratio_to_bare_echo" in f else "")
              + (f", {f['ratio_to_bare_requests']:.2f}x its floor's" if "ratio_to_bare_requests" in f else ""))


if __name__ == "__main__":
    main()
