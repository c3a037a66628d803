"""`bench/listing.py` (where a real-sized listing's CPU goes) runs and prints a figure for every part it names.
Apart from `test_bench.py`'s run (which checks the other two breakdowns, `bench/overhead.py`'s and
`bench/http_cpu.py`'s servers, in its JSON), so the two run side by side under xdist.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.coder_spec import reference_dir
from tests.project.test_bench import BENCH, TIMEOUT_S, number

pytestmark = [pytest.mark.system, pytest.mark.slow]


@pytest.mark.skipif(reference_dir() is None, reason="reference data (../shared/reference) absent")
def test_the_listing_breakdown_reads_a_real_sized_listing():
    """`bench/listing.py` (where list_agents' CPU goes on real-sized answers) reads its listing of real-sized
    workspaces through the fleet and prints each part and reference figure. The client decodes the listing with
    msgspec (issue 30.7), and list_agents over it answers what the emulator's own lean listing of the same
    fleet says: every agent idle after its turn (the bulk of a real workspace read changes nothing)."""
    done = subprocess.run([sys.executable, str(BENCH.with_name("listing.py")), "--agents", "5", "--runs", "1"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    f = json.loads(done.stdout)
    assert f["agents"] == 5 and 5 * 40_000 < f["listing_bytes"] < 5 * 60_000
    assert f["decoder"] == "msgspec" and f["same_as_lean"] is True and f["statuses"] == {"idle": 5}, f
    assert number(f["list_agents_over_floor"], 0.5, 50), f
    for figure in ("list_agents_ms", "list_agents_min_ms", "floor_ms", "floor_min_ms", "read_ms", "decode_ms",
                   "summaries_ms", "drop_ms", "reference_pydantic_lean_ms", "reference_pydantic_scan_only_ms", "reference_msgspec_scan_only_ms", "reference_json_loads_ms",
                   "reference_asyncio_read_ms", "reference_httpx_get_ms", "floor_read_and_decode_ms",
                   "floor_httpx_get_and_decode_ms"):
        assert number(f[figure], 0, 10_000), figure
