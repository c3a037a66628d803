"""Fixtures for the runner's tests: the scripted Messages API per test (see tests/runners.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runners import ScriptedAPI, scripted_api


@pytest.fixture
def api() -> Iterator[ScriptedAPI]:
    with scripted_api() as scripted:
        yield scripted
