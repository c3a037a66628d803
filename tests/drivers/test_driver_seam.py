"""The driver protocol is the only door to the agent's program: no other module speaks AgentAPI or the runner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fleet_mcp"
DRIVERS = PACKAGE / "drivers"
# Words only a module that speaks AgentAPI needs: its states, keystrokes, routes and events.
AGENTAPI_WORDS = re.compile(r'"stable"|"raw"|"acp"|\\x1b|/events|"agent_error"|/messages|MessagesPage')
# The runner's routes, as a client of it would name them.
RUNNER_WORDS = re.compile(r'FLEET_RUNNER_|"if_busy":|"decision":|"nothing_pending"')


WIRE = PACKAGE / "runner_wire.py"  # the runner's HTTP API, declared once for the runner and its driver


def fleet_modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "emulator" not in p.parts and "runner" not in p.parts
            and "__pycache__" not in p.parts and p != WIRE]


@pytest.mark.parametrize("path", [p for p in fleet_modules() if DRIVERS not in p.parents],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_drivers_speak_to_the_agents_program(path: Path) -> None:
    source = path.read_text()
    assert not AGENTAPI_WORDS.search(source), f"{path.name} speaks AgentAPI: {AGENTAPI_WORDS.search(source)}"
    assert not RUNNER_WORDS.search(source), f"{path.name} speaks the runner's API"
    assert "app_proxy_path(" not in source or path.name == "apps.py", f"{path.name} builds app-proxy paths"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not re.search(r"drivers\.(agentapi|runner)$", node.module), \
                f"{path.name} imports a driver directly; use fleet_mcp.drivers"


def test_agentapi_words_live_in_its_driver_only() -> None:
    speaking = sorted(str(p.relative_to(PACKAGE)) for p in fleet_modules() if AGENTAPI_WORDS.search(p.read_text()))
    assert speaking == ["drivers/agentapi.py"]


def test_the_runners_wire_is_shared_by_the_runner_and_its_driver_only() -> None:
    """One declaration of the runner's API: the runner answers with it, its driver reads with it, and the
    wire itself needs nothing of either side (the runner in a workspace imports nothing of the server)."""
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts
                   and "runner_wire" in p.read_text() and p != WIRE)
    assert users and all(u.startswith("runner/") or u == "drivers/runner.py" for u in users), users
    assert "drivers/runner.py" in users and "runner/app.py" in users
    imports = [n for n in ast.walk(ast.parse(WIRE.read_text())) if isinstance(n, ast.Import | ast.ImportFrom)]
    modules = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names} | \
        {n.module or "" for n in imports if isinstance(n, ast.ImportFrom)}
    assert modules <= {"__future__", "typing", "pydantic"}, modules
