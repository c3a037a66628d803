"""The README's guides say what the code does: the architecture picture, the emulator's scripting reference
(docs/emulator.md) for both runtimes, the log levels, the orchestrator's CLAUDE.md snippet, the licence and the changelog."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import get_args

from tests.support import TOOLS

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(title: str, document: str = README) -> str:
    """The document's text from heading `title` to the next heading of the same or a higher level (a heading
    inside a code block is text)."""
    unfenced = re.sub(r"```.*?```", lambda m: " " * len(m.group(0)), document, flags=re.S)
    start = document.index(title)
    level = title.split(" ")[0]
    ends = [m.start() for m in re.finditer(f"^#{{1,{len(level)}}} ", unfenced[start + len(title):], re.M)]
    return document[start:start + len(title) + (ends[0] if ends else len(document))]


def table(text: str) -> dict[str, list[str]]:
    """A markdown table's rows (not its header) by their first cell, backticks dropped: the other cells."""
    rows = {}
    lines = text.splitlines()
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if not line.startswith("|") or following.startswith("|--") or line.startswith("|--"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_architecture_picture_shows_the_path_to_claude_code():
    text = section("## How it fits together")
    picture = text[text.index("```mermaid"):text.index("```", text.index("```mermaid") + 3)]
    assert "flowchart" in picture
    for part in ("Orchestrator", "fleet-mcp", "Coder", "app proxy", "workspace", "fleet-mcp runner", "AgentAPI",
                 "Claude Code"):
        assert part in picture, part


def markers(module: ModuleType) -> set[str]:
    """The marker names a runtime's script reads, from its own pattern."""
    names = re.match(r"\\\[\\\[\(([a-z|]+)\)", module.MARKER.pattern)
    assert names, module.MARKER.pattern
    return set(names.group(1).split("|"))


def test_the_scripting_reference_covers_every_marker_of_both_runtimes():
    from fleet_mcp.emulator.agentapi import session
    from fleet_mcp.emulator.runners import anthropic

    agentapi, runner = markers(session), markers(anthropic)
    rows = table(section("## Scripting the agents", (REPO / "docs" / "emulator.md").read_text()))
    documented = {name.removeprefix("[[").removesuffix("]]").split(":")[0] for name in rows if name != "(none)"}
    assert documented == agentapi | runner and "(none)" in rows
    for name, (on_agentapi, on_runner) in rows.items():
        key = name.removeprefix("[[").removesuffix("]]").split(":")[0]
        for runtime, known, said in (("AgentAPI", agentapi, on_agentapi), ("runner", runner, on_runner)):
            assert said, (name, runtime)
            unknown = said.startswith("not a marker there")
            assert unknown == (key not in known and name != "(none)"), (name, runtime, said)
    assert "**the way to hold a runner agent busy**" in rows["[[hang]]"][1]
    assert "N tool uses, not N seconds" in rows["[[finish:N]]"][1]


def test_the_runtimes_default_turns_are_as_documented():
    from fleet_mcp.emulator.agentapi import session
    from fleet_mcp.emulator.runners import anthropic

    assert session.Script().finish == 5.0  # "(none)": the turn finishes after 5 s
    assert anthropic.Script.parse("plain").steps == 1  # one Write of step-1.txt
    assert anthropic.Script.parse("[[finish:99]]").steps == 50 and anthropic.Script.parse("[[finish:0]]").steps == 0
    assert (session.Script.parse("[[finish:1.5]]") or session.Script()).finish == 1.5  # decimals allowed
    assert session.Script.parse("[[edit:a.txt]]") is None  # not a marker there


def test_the_logs_section_names_every_level():
    from fleet_mcp.settings import Settings

    levels = set(get_args(Settings.model_fields["log_level"].annotation))
    rows = table(section("## Logs"))
    assert {name.removesuffix(" (default)").strip("`") for name in rows} == levels
    assert f"`{Settings.model_fields['log_level'].default}` (default)" in section("## Logs")
    assert "FLEET_MCP_LOG_LEVEL" in section("## Logs")


def test_the_orchestrators_claude_md_names_only_real_tools_and_values():
    from fleet_mcp.fleet.waits import CONDITIONS, MAX_WAIT_S

    text = section("## Tell the orchestrator how to use it")
    snippet = text[text.index("```markdown"):text.index("```", text.index("```markdown") + 3)]
    named = set(re.findall(r"`([a-z_]+)`", snippet))
    tools = {n for n in named if n.endswith(("_agent", "_agents", "_task", "_result", "_projects", "_roles",
                                              "_history", "_log"))}
    assert tools <= TOOLS, tools - TOOLS
    assert {"create_agent", "wait_for_agents", "answer_agent", "get_agent_result", "delete_agent"} <= tools
    until = re.search(r"until=\[([^\]]*)\]", snippet)
    assert until and {v.strip(' "') for v in until.group(1).split(",")} <= set(CONDITIONS)
    assert f"up to {MAX_WAIT_S:.0f}" in snippet


def test_the_licence_is_mit_as_the_package_says():
    import tomllib

    licence = (REPO / "LICENSE").read_text()
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert licence.startswith("MIT License") and "fleet-mcp contributors" in licence
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in licence


def test_the_changelog_keeps_a_changelog():
    log = (REPO / "CHANGELOG.md").read_text()
    assert log.startswith("# Changelog") and "https://keepachangelog.com/en/1.1.0/" in log
    assert "## [Unreleased]" in log
    headings = re.findall(r"^### (\w+)", log, re.M)
    assert headings and set(headings) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
