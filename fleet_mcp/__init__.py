"""fleet-mcp: run a fleet of Claude Code agents in Coder workspaces over MCP."""

__version__ = "0.1.0"

__all__ = ["__version__"]
