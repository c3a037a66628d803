#!/usr/bin/env python
"""Where list_agents' server CPU goes over HTTP (issue 21's `server_cpu_ratio`): five servers, one step apart,
each served by its own process over streamable HTTP and driven by the mcp SDK's client, as `measures.server_cpu`.

    python bench/http_cpu.py                     # the table, 300 calls per server and protocol era
    python bench/http_cpu.py --real-sized        # the stand-in's workspaces real-sized (~47 KB; needs the
                                                 # reference data, FLEET_MCP_REFERENCE_DIR)
    python bench/http_cpu.py --calls 1000 --json

- bare_echo: a bare FastMCP server's `echo` (`coder.BARE_SERVER`, the ratio's reference);
- bare_list: a bare FastMCP server whose `list_agents` answers the fleet's recorded answer (an `AgentList`,
  structured output): FastMCP's own cost of the answer the fleet gives;
- bare_listing: bare_list's process, its `list_agents_asking`: each call first asks the stand-in the fleet's own
  listing request with a plain `httpx.AsyncClient` (its defaults, a kept connection) and decodes its JSON: the
  floor of any FastMCP server that reads what list_agents reads, through httpx, before any work on it;
- fleet_from_memory_bare_http: `fleet-mcp` with `Fleet.list_agents` answering its first answer again, served
  by FastMCP's plain `http_app` (none of `serving/`'s layers: no /healthz, token gate, session cap, access
  log, Host/Origin guard);
- fleet_from_memory: the same through the fleet's own HTTP app (`serving.http.build_app`): the serving path
  and the tool path (registry deadline, `guarded`, `Envelope`, `Depends`), no Coder request;
- fleet: `fleet-mcp --transport http`, list_agents of 10 agents (one Coder request, the listing's parse).

CPU per call from /proc/<pid>/stat over the measured calls, in each protocol era (`coder.ERAS`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/processes.py: the process helpers

from coder import BARE_SERVER, ERAS, Coder, call, coder, http_session, stdio_session

from tests.processes import Running, clean_env, cpu_seconds, fleet_command, http_server

LIST_SERVER = textwrap.dedent('''\
    import json
    import os
    import sys

    import httpx
    from fastmcp import FastMCP

    from fleet_mcp.fleet.rules import FLEET_QUERY
    from fleet_mcp.models import AgentList

    ANSWER = AgentList.model_validate(json.loads(os.environ["ANSWER"]))
    CODER = httpx.AsyncClient(base_url=os.environ["CODER_URL"],
                              headers={"Coder-Session-Token": os.environ["CODER_SESSION_TOKEN"]})
    mcp = FastMCP("bare-list")


    @mcp.tool
    async def list_agents(status: str | None = None, project: str | None = None) -> AgentList:
        """The fleet's recorded answer."""
        return ANSWER


    @mcp.tool
    async def list_agents_asking(status: str | None = None, project: str | None = None) -> AgentList:
        """The fleet's listing request, its JSON decoded; then the fleet's recorded answer."""
        listing = await CODER.get("/api/v2/workspaces", params={"q": FLEET_QUERY})
        listing.raise_for_status()
        listing.json()
        return ANSWER


    if __name__ == "__main__":  # --transport http --host H --port P
        mcp.run(transport="http", host=sys.argv[4], port=int(sys.argv[6]), show_banner=False)
    ''')
FROM_MEMORY = textwrap.dedent('''\
    import os
    import sys

    from fleet_mcp.cli import main
    from fleet_mcp.fleet.agents import Fleet
    from fleet_mcp.serving import front, http

    asked = Fleet.list_agents
    answers = []


    async def list_agents(self, *args, **options):
        if not answers:
            answers.append(await asked(self, *args, **options))
        return answers[0]


    def plain_app(server, settings, host, drain):
        return server.http_app(path=front.MCP_PATH, stateless_http=settings.stateless)


    Fleet.list_agents = list_agents
    if os.environ.get("BARE_HTTP"):
        http.build_app = plain_app
    sys.exit(main(sys.argv[1:]))
    ''')
SERVERS = ("bare_echo", "bare_list", "bare_listing", "fleet_from_memory_bare_http", "fleet_from_memory", "fleet")
WARM = 10


async def cpu_per_call(server: Running, tool: str, arguments: dict, calls: int, warm: int = WARM) -> dict[str, float]:
    """CPU ms per call of `tool` over `calls` calls (after `warm`), in each protocol era."""
    out = {}
    for era in ERAS:
        async with http_session(server.url, era) as session:
            for _ in range(warm):
                answer = await call(session, tool, **arguments)
            if tool.startswith("list_agents") and answer["total_count"] != 10:
                raise RuntimeError(f"{tool} found {answer['total_count']} agents of 10")
            before = cpu_seconds(server.proc.pid)
            for _ in range(calls):
                await call(session, tool, **arguments)
            out[era] = round((cpu_seconds(server.proc.pid) - before) * 1e3 / calls, 3)
    return out


def servers(workdir: str, fleet_env: dict[str, str], answer: dict) -> dict[str, tuple]:
    """Each server's (command, env, tool, arguments), its scripts written into `workdir`; `answer`: the
    fleet's list_agents of 10, which the bare list servers answer (bare_list and bare_listing: two tools of
    one process)."""
    scripts = {}
    for name, text in (("bare.py", BARE_SERVER), ("list.py", LIST_SERVER), ("list_memory.py", FROM_MEMORY)):
        scripts[name] = [sys.executable, str(Path(workdir, name))]
        Path(workdir, name).write_text(text)
    return {
        "bare_echo": (scripts["bare.py"], clean_env(), "echo", {"text": "hi"}),
        "bare_list": (scripts["list.py"], {**fleet_env, "ANSWER": json.dumps(answer)}, "list_agents", {}),
        "bare_listing": (scripts["list.py"], {**fleet_env, "ANSWER": json.dumps(answer)}, "list_agents_asking", {}),
        "fleet_from_memory_bare_http": (scripts["list_memory.py"], {**fleet_env, "BARE_HTTP": "1"}, "list_agents",
                                        {}),
        "fleet_from_memory": (scripts["list_memory.py"], fleet_env, "list_agents", {}),
        "fleet": (fleet_command(), fleet_env, "list_agents", {}),
    }


async def breakdown(stand_in: Coder, workdir: str, answer: dict, calls: int, labels=SERVERS,
                    warm: int = WARM) -> dict[str, dict[str, float]]:
    """CPU ms per call of each server in `labels`, each era, the stand-in answering at once (its answers to
    the fleet's list_agents of 10 recorded)."""
    stand_in.replay(0)
    chosen = servers(workdir, clean_env(CODER_URL=stand_in.url, CODER_SESSION_TOKEN=stand_in.token), answer)
    out = {}
    for command, env, group in processes(chosen, labels):
        with http_server(Path(workdir), command=command, env=env) as server:
            for label in group:
                _, _, tool, arguments = chosen[label]
                asked = stand_in.stats()["requests"]
                out[label] = await cpu_per_call(server, tool, arguments, calls, warm)
                if label == "bare_listing" and stand_in.stats()["requests"] - asked != len(ERAS) * (warm + calls):
                    raise RuntimeError("bare_listing did not ask Coder's listing once a call")
    if misses := stand_in.stats()["misses"]:
        raise RuntimeError(f"the stand-in had no recorded answer for {misses[:5]}")
    return out


def processes(chosen: dict[str, tuple], labels) -> list[tuple[list[str], dict[str, str], list[str]]]:
    """(command, env, labels): the servers to start for `labels`, one process for those with the same both."""
    out: list[tuple[list[str], dict[str, str], list[str]]] = []
    for label in labels:
        command, env = chosen[label][:2]
        same = [p for p in out if p[0] == command and p[1] == env]
        if same:
            same[0][2].append(label)
        else:
            out.append((command, env, [label]))
    return out


def ratio(figures: dict[str, dict[str, float]], label: str, floor: str) -> float | None:
    """The worse era's CPU per call of `label` over `floor`'s (None when the floor read 0 ticks: /proc counts
    in 10 ms ticks, a few calls can fall between two)."""
    if not all(figures[floor].values()):
        return None
    return round(max(figures[label][era] / figures[floor][era] for era in ERAS), 2)


async def measure(args: argparse.Namespace) -> dict:
    with coder() as stand_in, tempfile.TemporaryDirectory(prefix="fleet-http-cpu-") as workdir:
        stand_in.real_bodies = args.real_sized
        stand_in.reseed(10)
        stand_in.record()
        fleet_env = clean_env(CODER_URL=stand_in.url, CODER_SESSION_TOKEN=stand_in.token)
        async with stdio_session(fleet_command(), fleet_env, workdir) as (session, _):
            await session.initialize()
            answer = await call(session, "list_agents")
        out: dict = {"calls": args.calls, "real_sized": args.real_sized, "agents": answer["total_count"],
                     **await breakdown(stand_in, workdir, answer, args.calls)}
    # server_cpu_ratio as bench/run.py made it before issue 33 (over a bare echo); its target is now over bare_listing
    for label in ("bare_listing", "fleet"):
        out[label + "_ratio"] = ratio(out, label, "bare_echo")
    out["fleet_ratio_to_bare_listing"] = ratio(out, "fleet", "bare_listing")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="measured calls per server and era (after 10)")
    parser.add_argument("--real-sized", action="store_true", help="real-sized workspaces (~47 KB each)")
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(figures))
        return
    bodies = "real-sized" if args.real_sized else "lean"
    print(f"server CPU ms per call over HTTP, {args.calls} calls each, list_agents of {figures['agents']} ({bodies})")
    print(f"{'':30s}" + "".join(f"{era:>12s}" for era in ERAS))
    for label in SERVERS:
        print(f"{label:30s}" + "".join(f"{figures[label][era]:12.3f}" for era in ERAS))
    print(f"over bare_echo (the worse era): bare_listing {figures['bare_listing_ratio']}x, "
          f"fleet {figures['fleet_ratio']}x; the fleet over its floor, bare_listing: "
          f"{figures['fleet_ratio_to_bare_listing']}x")


if __name__ == "__main__":
    main()
