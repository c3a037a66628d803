"""The folders show the architecture, and the README's layout says where things are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fleet_mcp"
EMULATOR = PACKAGE / "emulator"
MAX_LINES = 360  # issue 21: "no module outside emulator/ over ~350 lines"


def modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def imported(path: Path) -> list[str]:
    """The absolute names of the modules `path` imports from."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                names.append(".".join(base + ([node.module] if node.module else [])))
            else:
                names.append(node.module or "")
    return names


@pytest.mark.parametrize("path", modules(EMULATOR), ids=lambda p: str(p.relative_to(EMULATOR)))
def test_the_emulator_imports_nothing_of_the_client(path: Path) -> None:
    outside = [name for name in imported(path)
               if name.split(".")[0] == "fleet_mcp" and not name.startswith("fleet_mcp.emulator")]
    assert not outside, f"{path.relative_to(REPO)} imports {outside}: the emulator shares no code with the client"


def test_no_module_outside_the_emulator_is_over_the_limit() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines())
             for p in modules(PACKAGE) if EMULATOR not in p.parents}
    over = sorted(name for name, lines in sizes.items() if lines > MAX_LINES)
    assert not over, f"over {MAX_LINES} lines: {[(name, sizes[name]) for name in over]}"


def layout_paths() -> list[Path]:
    """Every file and folder the README's Layout section names, where the section places it."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    paths: list[Path] = []
    folders: dict[int, Path] = {}  # the folder an entry at this indent names, by indent
    here = REPO
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0].rstrip(",")
        if indent <= 8:  # an entry; deeper lines continue the entry above
            parent = max((i for i in folders if i < indent), default=None)
            base = folders[parent] if parent is not None else REPO
            if first.endswith("/"):
                here = base / first
                folders = {i: f for i, f in folders.items() if i < indent} | {indent: here}
                paths.append(here)
            else:
                here = base
                folders = {i: f for i, f in folders.items() if i < indent}
        for word in re.findall(r"[\w./-]+\.(?:py|md|conf)\b", line):
            paths.append(REPO / word if "/" in word else here / word)
    return paths


def test_the_readmes_layout_names_what_is_there() -> None:
    paths = layout_paths()
    assert len(paths) > 60, "the Layout section was not read"
    missing = [str(p.relative_to(REPO)) for p in paths if not p.exists()]
    assert not missing, f"README's Layout names what is not there: {missing}"


def test_every_package_is_in_the_readmes_layout() -> None:
    named = set(layout_paths())
    packages = {p.parent for p in PACKAGE.glob("*/__init__.py")} | {p.parent for p in EMULATOR.glob("*/__init__.py")}
    assert not sorted(str(p.relative_to(REPO)) for p in packages - named)


# Each layer of the tower imports only from below it: the Coder client knows no driver, a driver no fleet rule,
# the fleet no serving (DESIGN.md: tools → fleet → a driver or the Coder client).
ABOVE = {
    "coder": ("drivers", "fleet", "serving", "server", "tools", "registry", "cli"),
    "drivers": ("fleet", "serving", "server", "tools", "registry", "cli"),
    "fleet": ("serving", "server", "tools", "registry", "cli"),
}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_imports_run_one_way(layer: str) -> None:
    upward = {str(path.relative_to(PACKAGE)): name for path in modules(PACKAGE / layer) for name in imported(path)
              if name.split(".")[:2][-1] in ABOVE[layer] and name.startswith("fleet_mcp.")}
    assert not upward, f"{layer}/ imports from above it: {upward}"
