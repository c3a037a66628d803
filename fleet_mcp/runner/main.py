"""Start the runner: settings, the state file, a loopback socket, then uvicorn until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import socket
import sys

__all__ = ["main", "serve"]

log = logging.getLogger("fleet_mcp.runner")


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


async def serve(app, sock: socket.socket) -> None:
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
    if importlib.util.find_spec("claude_agent_sdk") is None:
        print("fleet-mcp runner: claude-agent-sdk is missing; install coder-fleet-mcp[runner]", file=sys.stderr)
        return 2
    try:
        settings = load(args)
        if settings.spec_file is not None:
            settings.first_prompt()
        if not settings.workdir.is_dir():
            raise ValueError(f"workdir {settings.workdir} is not a directory")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"fleet-mcp runner: bad settings: {problems}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"fleet-mcp runner: {exc}", file=sys.stderr)
        return 2
    from .app import build_app
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
    host, port = sock.getsockname()[:2]
    print(f"FLEET_RUNNER_URL=http://{f'[{host}]' if ':' in host else host}:{port}", flush=True)
    log.info("runner for %s (state %s, session %s)", settings.workdir, settings.state_path,
             conversation.saved.session_id or "new")
    asyncio.run(serve(build_app(conversation), sock))
    return 0
