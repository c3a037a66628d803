"""specs/runner.md's threat model names, for each way out of a workspace, the test that shows its defence:
each named test exists, so the table cannot point at a test renamed or gone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "runner.md"


def _named() -> list[tuple[str, str]]:
    """(file, test) for every `file::name` and following `::name` in the threat model's table."""
    model = SPEC.read_text().split("## Threat model", 1)[1].split("**What remains**", 1)[0]
    found = []
    for row in (line for line in model.splitlines() if line.startswith("|")):
        file = None
        for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", row):
            file = path or file
            assert file, f"a test named without its file: {name}"
            found.append((file, name))
    return found


def test_every_test_the_threat_model_names_exists() -> None:
    named = _named()
    assert len(named) >= 15
    missing = []
    for file, name in named:
        tree = ast.parse((REPO / file).read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if name not in defined:
            missing.append(f"{file}::{name}")
    assert not missing, f"specs/runner.md names tests that do not exist: {missing}"
