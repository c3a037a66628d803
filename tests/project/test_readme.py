"""The README says what the code does: its tool reference is current, its commands are the CI's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tool_reference_is_current():
    result = subprocess.run([sys.executable, "scripts/tool_reference.py", "--check"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_ci_runs_the_readmes_commands_verbatim():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    demo = 'python3 -m venv .venv && .venv/bin/pip install -e ".[runner]" && .venv/bin/fleet-mcp demo'
    lint = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test,runner]" && '
            '.venv/bin/ruff check fleet_mcp tests bench scripts && .venv/bin/mypy fleet_mcp')
    suite = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test,runner]" && .venv/bin/python -m pytest'
    for command in (demo, lint, suite):
        assert command in readme and command in ci.splitlines()
    assert ci.rstrip().splitlines()[-1] == suite  # the suite's result is CI's result


def test_the_statuses_section_explains_every_status():
    from typing import get_args

    from fleet_mcp.models import AgentStatus

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Statuses"):readme.index("## Troubleshooting")]
    assert "```mermaid" in section and "stateDiagram" in section
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for status in get_args(AgentStatus):
        assert any(f"`{status}`" in row.split("|")[1] for row in rows), f"{status} is not explained"
