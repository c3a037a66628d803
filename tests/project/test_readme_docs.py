"""The README for a person in a hurry: its first screen adds the server to Claude Code, what it says about Claude
Code is what the bundled Claude Code does, and every link into docs/ lands on a heading that is there."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FIRST_SCREEN = 60  # lines


def heading_line(title: str) -> int:
    return README.splitlines().index(title) + 1


def test_the_first_screen_says_what_it_is_shows_the_demo_and_adds_it_to_claude_code():
    first = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "Claude Code" in first.split("##")[0] and "Coder" in first.split("##")[0]  # what it is
    assert "fleet-mcp demo" in first
    assert heading_line("## Add it to Claude Code") < FIRST_SCREEN // 2
    assert "claude mcp add fleet" in first
    assert "<!-- settings:start -->" not in README and "<!-- tools:start -->" not in README  # references: docs/


def test_the_launch_forms_name_no_placeholder_repository():
    assert "OWNER" not in README and "github.com/OWNER" not in "".join(p.read_text() for p in DOCUMENTS)
    section = README[README.index("## Add it to Claude Code"):README.index("## Point it at your Coder")]
    assert "uvx --from /path/to/fleet-mcp fleet-mcp" in section and "coder-fleet-mcp" in section


def test_the_readme_says_a_project_server_waits_for_approval_and_how_to_see_why_it_failed():
    section = README[README.index("## Add it to Claude Code"):README.index("## Point it at your Coder")]
    for words in (".mcp.json", "Pending approval", "claude mcp reset-project-choices", "MCP_TIMEOUT=",
                  "~/.cache/claude-cli-nodejs/", "mcp-logs-fleet", "Connection closed"):
        assert words in section, words


@pytest.fixture(scope="module")
def claude_code() -> mmap.mmap:
    """The Claude Code that claude-agent-sdk bundles (the runner extra), mapped for reading."""
    sdk = pytest.importorskip("claude_agent_sdk")
    binary = Path(sdk.__file__).parent / "_bundled" / "claude"
    if not binary.exists():
        pytest.skip("claude-agent-sdk bundles no Claude Code here")
    with binary.open("rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def test_what_the_readme_says_of_claude_code_is_what_the_bundled_one_does(claude_code):
    """MCP_TIMEOUT, the approval of .mcp.json servers and the mcp-logs directory, as Claude Code spells them."""
    for words in (b"MCP_TIMEOUT", b"Pending approval", b"reset-project-choices", b"mcp-logs-", b'"claude-cli"',
                  b"-nodejs", b"XDG_CACHE_HOME", b".cache", b'replace(/[^a-zA-Z0-9]/g,"-")'):
        assert claude_code.find(words) >= 0, words
    assert claude_code.find(b"A value that isn't a positive number counts as 30 seconds") >= 0  # the default


def test_every_inspector_command_names_a_version_that_runs_on_node_20():
    """`npx @modelcontextprotocol/inspector` on Node 20 gets 0.15.0 (the newest without `engines: node>=22`),
    which has no `--header`: the docs name 0.21.1, which has it and runs on Node 20."""
    commands = [line for p in DOCUMENTS for line in p.read_text().splitlines() if line.startswith("npx") and "inspector" in line]
    assert commands
    for command in commands:
        assert "@modelcontextprotocol/inspector@0.21.1 " in command, command


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    unfenced = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", unfenced, re.M)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_lands(document: Path) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", document.read_text(), flags=re.S))
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (document.parent / target).resolve() if target else document
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(link)
    assert not broken, broken
