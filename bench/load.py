#!/usr/bin/env python
"""Load: MCP clients at once over streamable HTTP (half the handshake era, half 2026-07-28), rounds of ten mixed
tool calls each, against `fleet-mcp --transport http` over a `fleet-mcp emulator` (real time).

    python bench/load.py                          # 50 clients x 40 calls: bench/RESULTS.md's load figures
    python bench/load.py --clients 20 --calls 10 --json

Each call must succeed or answer the one envelope it may (start_agent_task on a busy agent: `conflict`), and
no client may see another's agent (tests/load_clients.py checks every answer). Printed: throughput, p50/p99
latency, the median per tool, the CPU seconds of the server, the emulator and the clients; `problems` lists
every failed check and `server_errors` any traceback in the server's log. Exit 1 if either is not empty.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the process helpers and the clients

from tests.load_clients import ROUND, load, seed_clients, summary
from tests.processes import SERVER, clean_env, cpu_seconds, emulator_process, http_server


def run(clients: int, calls: int, timeout_s: float) -> dict:
    with emulator_process() as coder, tempfile.TemporaryDirectory(prefix="fleet-load-") as workdir, \
            http_server(Path(workdir), command=SERVER,
                        env=clean_env(CODER_URL=coder.url, CODER_SESSION_TOKEN=coder.token,
                                      FLEET_MCP_MAX_AGENTS="0")) as fleet:  # 2 agents a client: past the default cap
        crowd = seed_clients(coder.url, coder.token, clients)
        pids = {"fleet_server": fleet.proc.pid, "emulator": coder.proc.pid}
        before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        own = time.process_time()
        wall = asyncio.run(load(fleet.url, crowd, calls // ROUND, timeout_s))
        cpu = {k: round(cpu_seconds(pid) - before[k], 1) for k, pid in pids.items()}
        cpu["clients"] = round(time.process_time() - own, 1)
        logs = fleet.logs()
    result = summary(crowd, wall)
    result["cpu_s"] = cpu
    result["server_errors"] = [line for line in logs.splitlines() if "Traceback" in line or "unexpected" in line]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50, help="MCP clients at once (at most 100)")
    parser.add_argument("--calls", type=int, default=40, help=f"calls per client, a multiple of {ROUND}")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="bound on the whole load")
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args()
    if not 1 <= args.clients <= 100 or args.calls < ROUND or args.calls % ROUND:
        parser.error(f"--clients 1..100, --calls a positive multiple of {ROUND}")
    result = run(args.clients, args.calls, args.timeout_s)
    if args.json:
        print(json.dumps(result))
    else:
        lat = result["latency_ms"]
        print(f"load: {result['clients']} clients x {args.calls} calls = {result['calls']} calls in "
              f"{result['wall_s']:.1f} s ({result['calls_per_s']:.0f} calls/s); latency p50 {lat['p50']} ms, "
              f"p99 {lat['p99']} ms, max {lat['max']} ms; outcomes {result['outcomes']}; "
              f"tasks started {result['tasks_started']}")
        print("median per tool (ms): " + ", ".join(f"{t} {v}" for t, v in result["median_ms_per_tool"].items()))
        print("CPU seconds during the load: " + ", ".join(f"{k} {v}" for k, v in result["cpu_s"].items()))
        for problem in (result["problems"] + result["server_errors"])[:20]:
            print("problem: " + problem)
    return 1 if result["problems"] or result["server_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
