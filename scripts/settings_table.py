"""Write the settings table (docs/settings.md) from the `Settings` fields (their descriptions and defaults).

    python scripts/settings_table.py          # rewrite the table in docs/settings.md
    python scripts/settings_table.py --check  # exit 1 when docs/settings.md is stale

The table sits between `<!-- settings:start -->` and `<!-- settings:end -->`;
`fleet-mcp --help` lists the same settings (`fleet_mcp.settings_help.documented`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tool_reference import DOCS, updated
from tool_reference import main as rewrite  # a sibling script, found through the path above

START, END = "<!-- settings:start -->", "<!-- settings:end -->"
SETTINGS = DOCS / "settings.md"
__all__ = ["END", "SETTINGS", "START", "main", "render", "updated"]


def render() -> str:
    from fleet_mcp.settings_help import documented

    lines = ["| setting | default | meaning |", "|---|---|---|"]
    lines += [f"| `{env}` | {default} | {meaning} |" for env, default, meaning in documented()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    return rewrite(argv, render(), START, END, "scripts/settings_table.py", SETTINGS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
