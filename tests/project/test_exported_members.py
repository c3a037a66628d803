"""Each package's public names, pinned (as httpx's tests/test_exported_members.py): a name joins or leaves a
package's `__all__` on purpose, and every module says once, in `__all__`, what it offers."""

from __future__ import annotations

import importlib
from inspect import ismodule
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fleet_mcp"
# The package itself re-exports these; the others offer their modules, nothing of their own.
EXPORTED = {
    "fleet_mcp": ["__version__"],
    "fleet_mcp.coder": [],
    "fleet_mcp.drivers": [
        "AgentAPIDriver", "Answered", "Busy", "Driver", "DriverError", "DriverKind", "IfBusy", "Live", "LiveState", "Message",
        "NothingPending", "NotSupported", "Pending", "RunnerDriver", "Slugs", "StalePrompt", "TurnEnd", "TurnResult", "Unkeyed",
        "Unreachable", "agent_and_app", "driver_app", "driver_for", "same_reach", "screen_prompt",
    ],
    "fleet_mcp.emulator": ["REAL_TIME", "Emulator"],
    "fleet_mcp.fleet": [],
    "fleet_mcp.runner": ["main", "serve"],
    "fleet_mcp.serving": [],
}


def module_names() -> list[str]:
    """Every module of the package outside the emulator (a test double, with its own conventions)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "emulator" in parts or "__pycache__" in parts or parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_package_is_pinned() -> None:
    packages = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.glob("**/__init__.py")
                if p.parent.relative_to(PACKAGE).parts[:1] != ("emulator",) or p.parent == PACKAGE / "emulator"}
    assert packages == set(EXPORTED)


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_each_package_exports_what_is_pinned(name: str) -> None:
    package = importlib.import_module(name)
    assert getattr(package, "__all__", None) == EXPORTED[name]
    # Whatever the package defines itself, or takes from its own modules, is exported: nothing public is left
    # out by accident (what it imports from elsewhere, to use, is not its own).
    own = {key for key, value in vars(package).items() if not key.startswith("_") and not ismodule(value)
           and isinstance(getattr(value, "__module__", None), str) and value.__module__.startswith(name)}
    assert own <= set(EXPORTED[name])


@pytest.mark.parametrize("name", module_names())
def test_each_module_lists_its_public_names_once(name: str) -> None:
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    assert listed is not None, f"{name} has no __all__"
    assert len(listed) == len(set(listed)), f"{name}: a name is listed twice"
    assert [n for n in listed if not hasattr(module, n)] == [], f"{name} lists names it does not have"
