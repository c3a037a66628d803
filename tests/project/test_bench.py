"""`bench/run.py --quick --json` runs, and prints one JSON line with every figure, sanely valued.

The performance targets themselves are the benchmark's figures, not assertions here;
the one property checked is a correctness one: list_agents asks Coder a fixed
number of requests (at most 3) whatever the fleet size.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench" / "run.py"
TIMEOUT_S = 240
SIZES = ["10", "100"]  # two sizes, so "the same number of requests whatever the size" is checked
TARGETS = {"list_agents_requests", "cold_start_ratio", "rss_ratio", "tool_overhead_ms", "list_agents_100_wall_ms"}


@pytest.fixture(scope="module")
def figures() -> dict:
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", "--sizes", ",".join(SIZES)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout[:2000]
    return json.loads(lines[0])


def number(value, low: float = 0.0, high: float = math.inf) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and low <= value <= high


def test_every_figure_is_there_and_sane(figures):
    f = figures
    assert f["latency_ms"] == 20 and f["quick"] is True
    assert number(f["cold_start_ratio"], 0.3, 5) and number(f["rss_ratio"], 0.3, 5)
    assert all(number(f["cold_start_ms"][k], 50, 60_000) for k in ("fleet", "bare"))
    assert number(f["cold_start_cpu_ratio"], 0.3, 5)
    assert all(number(f["cold_start_cpu_ms"][k], 10, 60_000) for k in ("fleet", "bare"))
    assert all(number(f["rss_kb"][k], 10_000, 2_000_000) for k in ("fleet", "bare"))
    # Each Coder request waits the latency: what is left over is small and never negative.
    assert number(f["tool_overhead_ms"], 0, 1_000) and number(f["bare_tool_call_ms"], 0, 1_000)
    assert number(f["coder_request_ms"], f["latency_ms"], 1_000)
    assert number(f["tool_overhead_net_ms"], -1_000, f["tool_overhead_ms"])
    assert f["show_agent_coder_requests"] >= 2
    assert number(f["show_agent_wall_ms"], f["latency_ms"] * f["show_agent_coder_requests"], 10_000)
    assert f["create_agent_coder_requests"] >= 3
    assert number(f["create_agent_wall_ms"], f["latency_ms"], 10_000)
    assert number(f["rss_after_list_kb"], 10_000, 4_000_000)
    assert set(f["list_agents"]) == set(SIZES)
    for size in SIZES:
        at = f["list_agents"][size]
        assert number(at["wall_ms"], f["latency_ms"], 60_000) and number(at["coder_ms"], f["latency_ms"], 60_000)
    assert set(f["targets"]) == TARGETS
    assert all(isinstance(t["pass"], bool) and "target" in t and "value" in t for t in f["targets"].values())
    assert f["runs"]["cold_start"] >= 1 and f["runs"]["per_size"] >= 1
    assert set(f["machine"]) == {"nproc", "cpu", "memory_gb", "python", "date", "loadavg_1min_before",
                                 "loadavg_1min_after"}


def test_list_agents_asks_coder_the_same_few_requests_whatever_the_fleet_size(figures):
    requests = [figures["list_agents"][size]["coder_requests"] for size in SIZES]
    assert 1 <= requests[0] <= 3
    assert requests == [requests[0]] * len(SIZES)
    assert not any(figures["list_agents"][size]["coder_requests_varied"] for size in SIZES)
