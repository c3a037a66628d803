"""Write the tool reference (docs/tools.md) from the tools themselves.

    python scripts/tool_reference.py          # rewrite the section in docs/tools.md
    python scripts/tool_reference.py --check  # exit 1 when docs/tools.md is stale

The section sits between `<!-- tools:start -->` and `<!-- tools:end -->`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
TOOLS = DOCS / "tools.md"
START, END = "<!-- tools:start -->", "<!-- tools:end -->"


def _type(schema: dict) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"] if s.get("type") != "null")
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return schema.get("type", "any")


def _hints(annotations) -> str:
    if annotations is None:
        return ""
    if annotations.read_only_hint:
        return "read-only"
    words = ["destructive" if annotations.destructive_hint else "changes state"]
    if annotations.idempotent_hint:
        words.append("idempotent")
    return ", ".join(words)


async def render() -> str:
    from fleet_mcp.server import build_server
    from fleet_mcp.settings import Settings

    server = build_server(Settings(coder_url="http://coder.invalid", coder_session_token="unused"))
    lines = []
    for tool in await server.list_tools():
        params = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        lines += [f"## `{tool.name}` — {tool.title}", "", f"*{_hints(tool.annotations)}*", "",
                  " ".join(line.strip() for line in (tool.description or "").splitlines()), ""]
        if params:
            lines += ["| parameter | type | required | description |", "|---|---|---|---|"]
            for name, schema in params.items():
                default = "" if name in required or schema.get("default") is None else \
                    f" (default `{schema['default']}`)"
                lines.append(f"| `{name}` | {_type(schema)} | {'yes' if name in required else 'no'} | "
                             f"{schema.get('description', '')}{default} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def updated(readme: str, reference: str, start: str = START, end: str = END) -> str:
    """`readme` (a document) with the section between `start` and `end` replaced by `reference`."""
    head, _, rest = readme.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n\n{reference}\n{end}{tail}"


def main(argv: list[str], reference: str | None = None, start: str = START, end: str = END,
         script: str = "scripts/tool_reference.py", target: Path = TOOLS) -> int:
    """Rewrite `target`'s section (`--check`: exit 1 when it is stale); scripts/settings_table.py uses it too."""
    text = target.read_text()
    name = target.relative_to(DOCS.parent)
    if start not in text or end not in text:
        print(f"{name} lacks the {start} / {end} markers", file=sys.stderr)
        return 1
    fresh = updated(text, reference if reference is not None else asyncio.run(render()), start, end)
    if "--check" in argv:
        if fresh != text:
            print(f"{name}'s section {start} is stale: run python {script}", file=sys.stderr)
            return 1
        return 0
    target.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
