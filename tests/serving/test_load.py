"""Load: MCP clients at once over streamable HTTP, mixed tool calls each, against `fleet-mcp --transport http`
over a `fleet-mcp emulator` on a real socket (real time), run as `bench/load.py` (which it tests too).

Every call must succeed or answer only the envelope it may (start_agent_task on a busy agent: `conflict`), and
no client may see another's agent where it asked about its own: show_agent names its agent and its workspace id,
a created agent carries its creator's spec, an agent's log holds only its own client's tasks. The throughput
figures (50 clients x 40 calls) are `python bench/load.py`'s, in bench/RESULTS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import WAIT_S, clean_env

pytestmark = [pytest.mark.system, pytest.mark.slow]

LOAD = Path(__file__).resolve().parents[2] / "bench" / "load.py"
# 20 clients, one round of the ten calls each: every tool of the round called by 20 sessions in flight at once
# (both protocol eras), each answer checked against its own client. Isolation and errors under concurrency need
# the calls to interleave in the server, which 20 clients do; 50 x 40 only repeats the same interleavings (and
# is the benchmark's throughput figure).
CLIENTS, CALLS = 20, 10


def test_clients_at_once_each_see_only_their_own_agents_and_no_error():
    done = subprocess.run([sys.executable, str(LOAD), "--clients", str(CLIENTS), "--calls", str(CALLS),
                           "--timeout-s", str(5 * WAIT_S), "--json"], capture_output=True, text=True,
                          timeout=6 * WAIT_S, stdin=subprocess.DEVNULL, env=clean_env(), check=False)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout[-2000:], done.stderr[-4000:])
    result = json.loads(lines[0])
    print(f"\nload: {result['calls']} calls in {result['wall_s']} s, latency {result['latency_ms']}, "
          f"outcomes {result['outcomes']}, CPU s {result['cpu_s']}")
    assert result["problems"] == [], "\n".join(result["problems"][:20])
    assert result["calls"] == CLIENTS * CALLS
    assert set(result["outcomes"]) <= {"ok", "conflict"}, result["outcomes"]
    assert result["outcomes"].get("ok", 0) >= CLIENTS * (CALLS - 1)  # only start_agent_task may conflict
    assert result["server_errors"] == []
    assert done.returncode == 0, done.stderr[-4000:]
