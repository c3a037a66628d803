"""The bench's real-sized answers: each workspace the stand-in records carries a recorded v2.27
workspace's bulk (~47 KB, every key it has), while what the fleet reads stays the emulator's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from fleet_mcp.coder.schemas import WorkspacesPage
from fleet_mcp.drivers import Slugs
from fleet_mcp.fleet.status import Snapshot, list_status
from tests.coder_spec import missing_keys, reference_dir

pytestmark = pytest.mark.skipif(reference_dir() is None, reason="reference data (../shared/reference) absent")
STANDIN = Path(__file__).resolve().parents[2] / "bench" / "standin.py"


def standin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_standin", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_standin", module)
    spec.loader.exec_module(module)
    return module


async def test_real_sized_workspaces_are_as_big_and_keyed_as_real_ones_and_read_the_same(coder, emulator):
    module = standin()
    reference = reference_dir()
    assert reference is not None
    listing = reference / "coder" / "recorded" / "list_workspaces_success.yaml"
    real = module.load_real_workspace(str(listing))
    assert 40_000 < len(json.dumps(real, separators=(",", ":"))) < 60_000
    await coder.post("/emulator/fleet", json={"count": 3, "prefix": "sized"})
    emulator.advance(600)
    lean = (await coder.get("/api/v2/workspaces", params={"q": "param:fleet_mcp_managed=true"})).content
    body, sizes = module.real_sized_answer(lean, real)
    assert len(sizes) >= 3 and all(40_000 < size < 60_000 for size in sizes), sizes
    grown = json.loads(body)["workspaces"]
    assert all(len(json.dumps(ws)) > 6 * len(json.dumps(small)) for ws, small in
               zip(grown, json.loads(lean)["workspaces"], strict=True))
    assert not [p for ws in grown for p in missing_keys(real, ws) if "ai_task_sidebar" not in p]
    before, after = msgspec.json.decode(lean, type=WorkspacesPage), msgspec.json.decode(body, type=WorkspacesPage)
    assert [(w.name, list_status(Snapshot.of(w, Slugs()))) for w in before.workspaces] == \
        [(w.name, list_status(Snapshot.of(w, Slugs()))) for w in after.workspaces]
