"""The runner as a program of its own: `main(argv)` is `fleet-mcp runner ARGS...`, and `preload()` imports what
running takes. The emulator's fork server (fleet_mcp/emulator/forks.py) preloads it once and forks a runner per
workspace; run as `python -m fleet_mcp.runner.program ARGS...` when no fork server answers.
"""

from __future__ import annotations

import argparse
import sys

from .main import add_arguments
from .main import main as run

__all__ = ["main", "preload"]


def preload() -> None:
    """Import the runner and the SDK it drives (~1.5 s of CPU a process): once, for every copy forked after."""
    import claude_agent_sdk  # noqa: F401
    import uvicorn  # noqa: F401

    from . import app, door, report, session, settings, store  # noqa: F401


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleet-mcp runner")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
