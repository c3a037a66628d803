"""The benchmark's breakdowns run and print a figure for every server or part they name: `bench/overhead.py`
(where show_agent's overhead goes), `bench/http_cpu.py` (where list_agents' server CPU goes over HTTP) and
`bench/listing.py` (where a real-sized listing's CPU goes). Apart from `test_bench.py`'s quick run, so the
two run side by side under xdist.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from coder_spec import reference_dir
from test_bench import BENCH, TIMEOUT_S, number

pytestmark = [pytest.mark.system, pytest.mark.slow]


def test_the_overhead_breakdown_measures_each_server_it_names():
    """`bench/overhead.py` (where show_agent's overhead goes) runs its five servers and prints a figure for each."""
    done = subprocess.run([sys.executable, str(BENCH.with_name("overhead.py")), "--calls", "5", "--latency-ms", "5",
                           "--json"], capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                          check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    f = json.loads(done.stdout)
    assert f["calls"] == 5 and f["latency_ms"] == 5
    for server in ("bare_echo", "bare_answer", "bare_requests", "fleet_from_memory", "fleet"):
        assert number(f[server]["cpu_ms"], 0, 1_000) and number(f[server]["overhead_ms"], 0, 1_000), server
    # the floor asks what show_agent asks (3 requests, all recorded), the answers from memory ask nothing
    assert f["bare_requests"]["requests_per_call"] == f["fleet"]["requests_per_call"] == 3
    assert f["fleet_from_memory"]["requests_per_call"] == f["bare_answer"]["requests_per_call"] == 0
    assert number(f["bare_requests"]["ratio_to_bare_echo"], 0, 1_000) and number(f["fleet"]["ratio_to_bare_echo"], 0, 1_000)


@pytest.mark.skipif(reference_dir() is None, reason="reference data (../shared/reference) absent")
def test_the_listing_breakdown_reads_a_real_sized_listing():
    """`bench/listing.py` (where list_agents' CPU goes on real-sized answers) reads its listing of real-sized
    workspaces through the fleet and prints each part and reference figure."""
    done = subprocess.run([sys.executable, str(BENCH.with_name("listing.py")), "--agents", "5", "--runs", "1"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    f = json.loads(done.stdout)
    assert f["agents"] == 5 and 5 * 40_000 < f["listing_bytes"] < 5 * 60_000
    for figure in ("list_agents_ms", "validate_ms", "summaries_ms", "drop_ms", "reference_scan_only_ms",
                   "reference_json_loads_ms", "reference_asyncio_read_ms"):
        assert number(f[figure], 0, 10_000), figure


def test_the_http_cpu_breakdown_measures_each_server_in_each_protocol_era():
    """`bench/http_cpu.py` (where list_agents' server CPU goes over HTTP) runs its five servers over streamable
    HTTP and prints a CPU figure for each, in both protocol eras."""
    done = subprocess.run([sys.executable, str(BENCH.with_name("http_cpu.py")), "--calls", "5", "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    f = json.loads(done.stdout)
    assert f["calls"] == 5 and f["agents"] == 10 and f["real_sized"] is False
    for server in ("bare_echo", "bare_list", "bare_listing", "fleet_from_memory_bare_http", "fleet_from_memory",
                   "fleet"):
        assert set(f[server]) == {"initialize", "discover"}, server
        assert all(number(ms, 0, 1_000) for ms in f[server].values()), server
    for ratio in ("bare_listing_ratio", "fleet_ratio"):  # None only when the reference's few calls read 0 ticks
        assert f[ratio] is None and 0 in f["bare_echo"].values() or number(f[ratio], 0, 1_000), ratio
