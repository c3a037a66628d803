"""Start the runner: settings, the state file, a loopback socket, then uvicorn until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = ["SCRUBBED", "add_arguments", "guard_process", "main", "serve"]

log = logging.getLogger("fleet_mcp.runner")
# Read once into the settings, then dropped from the environment Claude Code inherits: Coder's agent token
# (with it the agent could post app statuses itself) and the key's verifier.
SCRUBBED = ("CODER_AGENT_TOKEN", "FLEET_RUNNER_KEY_SHA256")
PR_SET_DUMPABLE = 4


def guard_process() -> None:
    """Drop what Claude Code would inherit (`SCRUBBED`) and, on Linux, make this process non-dumpable, so a
    process of the same user can read neither its memory nor its /proc files (environ, mem)."""
    for name in SCRUBBED:
        os.environ.pop(name, None)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError) as exc:  # not fatal: the key is still never in this process's files
            log.warning("could not make the runner non-dumpable: %s", exc)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The runner's flags; each one defaults to its FLEET_RUNNER_* variable (cheap: the CLI builds them always)."""
    add = parser.add_argument
    add("--workdir", help="where Claude Code runs (default: cwd)")
    add("--state-file", help="durable state (default: <workdir>/.fleet-runner/state.json)")
    add("--host", help="bind address, loopback only (default 127.0.0.1)")
    add("--port", type=int, help="port (default 4300; 0 picks one, printed as FLEET_RUNNER_URL=...)")
    add("--app-slug", help="the Coder app whose statuses the runner reports (default fleet)")
    add("--spec-file", help="the first turn's prompt, from a file (else FLEET_RUNNER_SPEC)")
    add("--system-prompt", help="appended to Claude Code's system prompt")
    add("--model", help="Claude model (default: Claude Code's)")
    add("--max-turns", type=int, help="most model turns per task")
    add("--max-cost-usd", type=float, help="most USD a task may spend")
    add("--permission-mode", help="Claude Code permission mode (default acceptEdits)")
    add("--permission-timeout-s", type=float, help="seconds before an unanswered permission is denied (default 300)")


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


async def serve(app: ASGIApp, sock: socket.socket) -> None:
    """Serve `app` on `sock` until a signal asks to stop."""
    import uvicorn

    config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=5)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(args: argparse.Namespace) -> int:
    """Run the runner with parsed CLI `args` (see settings.add_arguments); 2 when it cannot start."""
    from pydantic import ValidationError

    from .settings import load

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = load(args)
        if settings.spec_file is not None:
            settings.first_prompt()
        settings.first_schema()
        if not settings.workdir.is_dir():
            raise ValueError(f"workdir {settings.workdir} is not a directory")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"fleet-mcp runner: bad settings: {problems}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"fleet-mcp runner: {exc}", file=sys.stderr)
        return 2
    try:  # after the settings (bad ones fail at once) and before serving, where its ~1.5 s would stall requests
        import claude_agent_sdk  # noqa: F401
    except ImportError:
        print("fleet-mcp runner: claude-agent-sdk is missing; install coder-fleet-mcp[runner]", file=sys.stderr)
        return 2
    from .app import build_app
    from .door import Door
    from .report import Reporter
    from .session import Conversation
    from .store import Store

    token = settings.coder_agent_token.get_secret_value() if settings.coder_agent_token else None
    reporter = Reporter(settings.coder_agent_url, token, settings.app_slug)
    try:
        conversation = Conversation(settings, Store(settings.state_path), reporter)
        sock = _bind(settings.host, settings.port)
    except (OSError, ValueError) as exc:
        print(f"fleet-mcp runner: {exc}", file=sys.stderr)
        return 2
    guard_process()
    if settings.key_sha256 is None:
        log.warning("no FLEET_RUNNER_KEY_SHA256: every call but /health is refused (the template hands the "
                    "runner its key's digest)")
    verifier = settings.key_sha256.get_secret_value() if settings.key_sha256 else None
    app = Door(build_app(conversation), verifier, settings.host_patterns)
    host, port = sock.getsockname()[:2]
    print(f"FLEET_RUNNER_URL=http://{f'[{host}]' if ':' in host else host}:{port}", flush=True)
    log.info("runner for %s (state %s, session %s)", settings.workdir, settings.state_path,
             conversation.saved.session_id or "new")
    asyncio.run(serve(app, sock))
    return 0
