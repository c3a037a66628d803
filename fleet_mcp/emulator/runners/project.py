"""The small project every runner workspace starts with: a git repository of one commit, so the real
Claude Code's edits and commits make real diffs. The commit is the same everywhere (fixed names and
dates), so a test can clone the same seed elsewhere and apply an agent's patch to it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["FILES", "seed_repository"]

FILES = {
    "README.md": "# calc\n\nA tiny calculator the fleet's agents work on.\n",
    ".gitignore": "__pycache__/\n*.pyc\n",
    "calc.py": (
        '"""A tiny calculator."""\n\n\n'
        "def add(a, b):\n    return a + b\n\n\n"
        "def sub(a, b):\n    return a - b\n"
    ),
    "test_calc.py": (
        "from calc import add, sub\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n"
    ),
}
WHO = {"GIT_AUTHOR_NAME": "Fleet Seed", "GIT_AUTHOR_EMAIL": "seed@fleet.invalid",
       "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_NAME": "Fleet Seed",
       "GIT_COMMITTER_EMAIL": "seed@fleet.invalid", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def seed_repository(path: Path) -> None:
    """Make `path` the seed project's repository (branch main, one commit) unless it is one already; the
    agent commits as "Fleet Agent"."""
    if (path / ".git").exists():
        return
    path.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (path / name).write_text(text, encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **WHO}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, env=env, timeout=60)

    git("init", "-q", "-b", "main")
    git("config", "user.name", "Fleet Agent")
    git("config", "user.email", "agent@fleet.invalid")
    git("add", "-A")
    git("commit", "-q", "-m", "Seed: a tiny calculator")
