"""`fleet-mcp runner`: the in-workspace service that owns one Claude Code conversation (see specs/runner.md).

Needs the `runner` extra (claude-agent-sdk); nothing here is imported by the MCP server.
"""

from .main import main, serve

__all__ = ["main", "serve"]
