#!/usr/bin/env python
"""What a hostile runner costs the fleet server: answers within the byte caps, built to be expensive (issue 30.2).

    python bench/hostile.py            # every case, each in a fresh process; a table
    python bench/hostile.py --json     # one JSON object on one line
    python bench/hostile.py --case results-empties   # one case, in this process

An agent can replace the runner on its app's port. Here an in-process emulator (runner runtime, on its virtual
clock) holds one runner agent, and the fleet server's transport hands that agent's app requests to a stand-in
that answers one route with a hostile body (the others healthily): 16 MiB of `{},` in a list, 1 MiB of `[`,
a string of escapes, a list of numbers. A tool that reads the route is called through a real MCP client while
a ticker on the same event loop measures how long any other caller would have waited (the loop's longest
stall), and the process's peak RSS over its RSS before the call. Targets (issue 30.2): at most 1 s, 100 MB and a
100 ms stall per case; the call ends in a value or that agent's clear problem.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

MiB = 1 << 20
AGENT = "hostile"
KEY = "k" * 43
APP = re.compile(rf"/@[^/]+/{AGENT}[^/]*/apps/fleet/(?P<route>[a-z]+)")
TARGETS = {"wall_s": 1.0, "rss_mb": 100.0, "stall_ms": 100.0}
HEALTHY = {
    "state": {"state": "idle", "since": "2026-11-26T12:00:00Z", "turns": 1, "cost_usd": 0.01,
              "last_turn": "succeeded"},
    "messages": {"messages": [{"id": 1, "role": "user", "content": "Go", "time": "2026-11-26T12:00:00Z"}]},
    "result": {"result": {"task": "Go", "text": "Done.", "subtype": "success", "finished_at": "2026-11-26T12:00:00Z"}},
    "results": {"results": [{"task": "Go", "text": "Done.", "subtype": "success"}]},
    "diff": {"scope": "task", "files": [], "page": 1, "pages": 1, "files_total": 0},
}


def _filled(head: bytes, item: bytes, tail: bytes, size: int) -> bytes:
    """`head`, then `item` joined by commas up to `size` bytes in all, then `tail`."""
    count = max(1, (size - len(head) - len(tail)) // (len(item) + 1))
    return head + b",".join([item] * count) + tail


def cases() -> dict[str, tuple[str, str, dict[str, object], bytes]]:
    """name: (route, tool, its arguments, the body): each within the route's byte cap (status 1 MiB,
    conversation 16 MiB)."""
    show = ("show_agent", {"agent_name": AGENT})
    result = ("get_agent_result", {"agent_name": AGENT})
    diff = ("show_agent_diff", {"agent_name": AGENT})
    return {
        "state-empties": ("state", *show, _filled(b'{"state":"idle","answered":[', b"{}", b"]}", MiB - 64)),
        "state-numbers": ("state", *show, _filled(b'{"state":"idle","answered":[', b"1", b"]}", MiB - 64)),
        "state-deep": ("state", *show, b"[" * (MiB - 64)),
        "state-escapes": ("state", *show, b'{"state":"idle","current_task":"' + b"\\u0001" * ((MiB - 64) // 6)
                          + b'"}'),
        "messages-empties": ("messages", *show, _filled(b'{"messages":[', b"{}", b"]}", 16 * MiB - 64)),
        "messages-deep": ("messages", *show, b'{"messages":[' + b"[" * (16 * MiB - 64)),
        "results-empties": ("results", *result, _filled(b'{"results":[', b"{}", b"]}", 16 * MiB - 64)),
        "result-empties": ("result", *result, _filled(b'{"result":{"changes":{"repository":"r","files":[', b"{}",
                                                      b"]}}}", 16 * MiB - 64)),
        "diff-empties": ("diff", *diff, _filled(b'{"files":[', b"{}", b"]}", MiB - 64)),
    }


class StandIn(httpx.AsyncBaseTransport):
    """The hostile agent's app: its routes answered here, everything else by the emulator."""

    def __init__(self, inner: httpx.AsyncBaseTransport, route: str, body: bytes) -> None:
        self.inner, self.route, self.body = inner, route, body

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        found = APP.search(request.url.path)
        if found is None:
            return await self.inner.handle_async_request(request)
        route = found["route"]
        body = self.body if route == self.route else json.dumps(HEALTHY.get(route, {})).encode()
        return httpx.Response(200, headers={"content-type": "application/json"}, content=body)


def status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak since `reset_peak`) of this process, in MiB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM starts again from VmRSS


async def run_case(name: str) -> dict[str, object]:
    from fastmcp import Client

    from fleet_mcp.emulator import Emulator
    from fleet_mcp.server import build_server
    from fleet_mcp.settings import Settings

    route, tool, arguments, body = cases()[name]
    emulator = Emulator(agent_runtime="runner")
    coder = httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                              headers={"Coder-Session-Token": "demo-token"})
    template = (await coder.get("/api/v2/organizations/coder/templates/fleet-demo")).json()
    params = {"fleet_mcp_managed": "true", "fleet_mcp_role": "coder", "fleet_mcp_agent_spec": "Go",
              "fleet_mcp_runner_key": KEY}
    made = await coder.post("/api/v2/users/me/workspaces", json={
        "name": AGENT, "template_id": template["id"],
        "rich_parameter_values": [{"name": k, "value": v} for k, v in params.items()]})
    assert made.status_code == 201, made.text
    await coder.post("/emulator/clock", json={"seconds": 600})
    for app in emulator.backend.workspaces[made.json()["id"]].latest_build.agents[0].apps:
        app.health = "healthy"  # as the emulator marks a runner that answers its /health: here the stand-in
    settings = Settings(coder_url="http://coder.test", coder_session_token="demo-token", retry_budget_s=0.0)
    stand_in = StandIn(httpx.ASGITransport(app=emulator.app), route, body)
    async with Client(build_server(settings, transport=stand_in)) as client:
        stand_in.route = "-"  # a healthy call first: imports and validators built, the pools warm
        await client.call_tool(tool, arguments, raise_on_error=False)
        stand_in.route = route
        loop = asyncio.get_running_loop()
        stalls: list[float] = []
        calling = True

        async def ticker() -> None:
            while calling:
                before = loop.time()
                await asyncio.sleep(0.001)
                stalls.append(loop.time() - before - 0.001)

        reset_peak()
        before = status_mb("VmRSS")
        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        answer = await client.call_tool(tool, arguments, raise_on_error=False)
        wall = time.perf_counter() - started
        calling = False
        await ticking
        peak = status_mb("VmHWM")
    text = answer.content[0].text if answer.content else ""
    outcome = json.loads(text).get("error", "error") if answer.is_error else "value"
    return {"case": name, "route": route, "tool": tool, "body_mb": round(len(body) / MiB, 1),
            "wall_s": round(wall, 3), "stall_ms": round(max(stalls) * 1000, 1),
            "rss_mb": round(max(0.0, peak - before), 1), "outcome": outcome, "said": text[:160]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(cases()))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(asyncio.run(run_case(args.case))))
        return
    rows = []
    for name in cases():
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True,
                              timeout=600, check=False)
        lines = done.stdout.strip().splitlines()
        rows.append(json.loads(lines[-1]) if done.returncode == 0 and lines else
                    {"case": name, "failed": done.stderr.strip().splitlines()[-1:]})
    if args.json:
        print(json.dumps({"cases": rows, "targets": TARGETS}))
        return
    print(f"{'case':18} {'tool':17} {'MiB':>5} {'wall s':>7} {'stall ms':>9} {'RSS MB':>7}  outcome")
    for r in rows:
        if "failed" in r:
            print(f"{r['case']:18} failed: {r['failed']}")
            continue
        print(f"{r['case']:18} {r['tool']:17} {r['body_mb']:>5} {r['wall_s']:>7} {r['stall_ms']:>9} "
              f"{r['rss_mb']:>7}  {r['outcome']}: {r['said'][:70]}")


if __name__ == "__main__":
    main()
