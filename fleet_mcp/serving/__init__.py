"""Serving the tools: stdio and HTTP, who a call acts for, start-up checks, and what keeps the server up and quiet."""

__all__: list[str] = []  # the package offers its modules
