"""The README says what the code does: its commands are the CI's; the references it links (docs/tools.md,
docs/settings.md) are current."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def script(name: str) -> ModuleType:
    """A script of scripts/, imported (run in-process: the quick loop starts no process)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_tool_reference_is_current():
    tool_reference = script("tool_reference")
    reference = (REPO / "docs" / "tools.md").read_text()
    assert tool_reference.updated(reference, await tool_reference.render()) == reference, \
        "docs/tools.md is stale: run python scripts/tool_reference.py"


def test_ci_runs_the_readmes_commands_verbatim():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    demo = 'python3 -m venv .venv && .venv/bin/pip install -e ".[runner]" && .venv/bin/fleet-mcp demo'
    lint = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test,runner]" && '
            '.venv/bin/ruff check fleet_mcp tests bench scripts && .venv/bin/mypy fleet_mcp tests')
    suite = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test,runner]" && .venv/bin/python -m pytest -n auto'
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


def test_settings_table_is_current():
    settings_table = script("settings_table")
    reference = (REPO / "docs" / "settings.md").read_text()
    fresh = settings_table.updated(reference, settings_table.render(), settings_table.START, settings_table.END)
    assert fresh == reference, "docs/settings.md's table is stale: run python scripts/settings_table.py"


def test_every_setting_is_described_and_in_the_table_once():
    from fleet_mcp.settings import Settings
    from fleet_mcp.settings_help import env_name

    reference = (REPO / "docs" / "settings.md").read_text()
    table = reference[reference.index("<!-- settings:start -->"):reference.index("<!-- settings:end -->")]
    listed = [line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")]
    assert len(listed) == len(set(listed)), "a setting is listed twice"
    assert listed == [env_name(name) for name in Settings.model_fields]
    assert all(info.description for info in Settings.model_fields.values())


def test_help_gives_each_setting_its_default_and_meaning():
    from fleet_mcp.cli import _parser
    from fleet_mcp.settings_help import documented

    text = " ".join(_parser().format_help().split())
    for env, default, meaning in documented():
        words = " ".join(meaning.replace("`", "").split())[:40]
        assert f"{env} {words}" in text, env
        assert f"(default: {default.replace('`', '')})" in text, env
