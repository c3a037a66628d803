"""Fixtures for the runner's tests: the scripted Messages API (see tests/runners.py), and one runner a module
whose tests can take turns on the same Claude Code: its start (Python, the SDK, Claude Code's node) costs
~2.5 s of CPU, which its tests need not each pay. A module sets the runner's flags with `runner_settings`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.runners import RunningRunner, ScriptedAPI, runner_process, scripted_api


@pytest.fixture(scope="module")
def api() -> Iterator[ScriptedAPI]:
    with scripted_api() as scripted:
        yield scripted


@pytest.fixture(scope="module")
def runner_settings() -> dict[str, Any]:
    """`runner_process` keywords for the module's runner (workdir=..., FLEET_RUNNER_*=...); a module overrides it."""
    return {}


@pytest.fixture(scope="module")
def shared_runner(api: ScriptedAPI, runner_settings: dict[str, Any],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRunner]:
    with runner_process(tmp_path_factory.mktemp("runner"), api.url, **runner_settings) as running:
        if "FLEET_RUNNER_SPEC" in runner_settings:  # the spec's turn ends before a test settles (interrupts) it
            running.wait_for(lambda s: s["turns"] >= 1 and s["state"] == "idle", what="the spec's turn over")
        yield running


@pytest.fixture
def runner(shared_runner: RunningRunner) -> Iterator[RunningRunner]:
    """The module's runner, idle with nothing queued when a test starts, and again after it."""
    shared_runner.settle()
    yield shared_runner
    shared_runner.settle()
