"""The `fleet-mcp` command: serve the tools, or run the emulator.

Each subcommand imports only what it needs, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import sys
import textwrap
from collections.abc import Callable

from . import __version__

__all__ = ["main", "preload"]

# httpx imports its own command-line client (click, rich, pygments) whenever those are installed, and falls back
# when that import fails: this process never runs it, and importing it costs start-up 15-20 ms.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

SERVE_EXIT_CODES = """\
exit codes:
  0  stopped cleanly (SIGTERM or SIGINT: calls in flight get 5 s to finish; stdin closed: their deadlines)
  2  could not start: one line on stderr names the cause and the fix
"""

DOCTOR_EPILOG = """\
settings (environment or .env): CODER_URL, CODER_SESSION_TOKEN, FLEET_MCP_APP_SLUG,
  FLEET_MCP_CONNECT_TIMEOUT_S, FLEET_MCP_REQUEST_TIMEOUT_S

exit codes:
  0  at least one template is a complete fleet project
  1  Coder answers, but no template is a complete fleet project (the report says what is missing)
  2  Coder cannot be used: one line on stderr names the cause and the fix
"""


class _Parser(argparse.ArgumentParser):
    """Its help ends with every setting, read from `Settings` only when help is asked for (start-up stays fast)."""

    def format_help(self) -> str:
        from .settings_help import documented

        lines = ["settings (environment or .env):"]
        for env, default, meaning in documented():
            plain = re.sub(r"\[([^]]+)\]\(#[^)]*\)", r"\1", f"{meaning} (default: {default})").replace("`", "")
            lines.append(f"  {env}")
            lines += textwrap.wrap(plain, width=100, initial_indent="      ", subsequent_indent="      ")
        self.epilog = "\n".join(lines) + "\n\n" + SERVE_EXIT_CODES
        return super().format_help()


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fleet-mcp", description="Run a fleet of Claude Code agents in Coder.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fleet-mcp {__version__}")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio (default) or streamable HTTP at /mcp")
    parser.add_argument("--host", default="127.0.0.1",
                        help="HTTP bind address; off loopback: FLEET_MCP_AUTH_TOKEN or FLEET_MCP_AUTH=coder")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    parser.add_argument("--read-only", action="store_true",
                        help="serve only the tools that change nothing (as FLEET_MCP_READ_ONLY=true)")
    parser.add_argument("--emulator", action="store_true",
                        help="serve against an in-process Coder emulator with the demo seed (no Coder needed)")
    parser.add_argument("--agent-runtime", dest="emulator_runtime", default="agentapi",
                        choices=["agentapi", "runner"],
                        help="with --emulator: scripted AgentAPI agents (default), or the real Claude Code through "
                             "`fleet-mcp runner` (needs the runner extra)")
    sub = parser.add_subparsers(dest="command", parser_class=argparse.ArgumentParser)
    emu = sub.add_parser("emulator", help="serve a local Coder emulator (demo seed, real time)")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    emu.add_argument("--token", default="demo-token", help="session token of the demo user")
    emu.add_argument("--seed", default="demo", choices=["demo", "empty"],
                     help="demo: user demo, fleet templates and workspaces; empty: only org coder and user demo")
    emu.add_argument("--agent-runtime", default=None, choices=["agentapi", "runner"],
                     help="behind fleet agents: a real `fleet-mcp runner` per workspace (app fleet; the default "
                          "with the runner extra), or a scripted Claude Code behind AgentAPI (app ccw; the default "
                          "without it)")
    emu.add_argument("--anthropic-base-url", default=None,
                     help="the Messages API runners talk to (default: the emulator's scripted one)")
    emu.add_argument("--wildcard-access-url", default="", metavar="PATTERN",
                     help="serve subdomain apps under this wildcard host, as Coder's flag (e.g. '*.apps.example.test')")
    emu.add_argument("--disable-path-apps", action="store_true",
                     help="refuse path-based apps with Coder's 403 page, as Coder's flag")
    sub.add_parser("demo", help="a tour of the tools through an MCP client, against the embedded emulator")
    doctor = sub.add_parser("doctor", help="check Coder, the token and which templates are complete fleet projects",
                            epilog=DOCTOR_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    doctor.add_argument("--agent-runtime", dest="doctor_runtime", default="agentapi", choices=["agentapi", "runner"],
                        help="with --emulator: the seed whose fleet templates use AgentAPI (default) or the runner")
    doctor.add_argument("--emulator", dest="doctor_emulator", action="store_true",
                        help="check the embedded emulator (demo seed) instead of CODER_URL")
    from .runner.main import add_arguments as runner_arguments

    runner_arguments(sub.add_parser("runner", help="serve one Claude Code conversation in this workspace "
                                    "(needs the runner extra; see specs/runner.md)"))
    return parser


def _emulator(args: argparse.Namespace) -> int:
    from .emulator.app import REAL_TIME, Emulator, bind, serve

    runner_installed = importlib.util.find_spec("claude_agent_sdk") is not None
    runtime = args.agent_runtime or ("runner" if runner_installed else "agentapi")
    if runtime == "runner" and not runner_installed:
        print("fleet-mcp emulator: --agent-runtime runner needs claude-agent-sdk; install coder-fleet-mcp[runner]",
              file=sys.stderr)
        return 2
    emulator = Emulator(token=args.token, virtual=False, timings=REAL_TIME, seed=args.seed,
                        agent_runtime=runtime, anthropic_base_url=args.anthropic_base_url)
    emulator.backend.wildcard_hostname = args.wildcard_access_url
    emulator.backend.disable_path_apps = args.disable_path_apps
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:  # as the server says it: one line, exit 2
        from .serving.listener import bind_failure

        print(f"fleet-mcp emulator: {bind_failure(exc, args.host, args.port)}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    emulator.url = f"http://{url_host}:{port}"
    print(f"CODER_URL={emulator.url}", flush=True)
    print(f"CODER_SESSION_TOKEN={emulator.token}", flush=True)
    asyncio.run(serve(emulator.app, sock))
    return 0


def _serve(args: argparse.Namespace) -> int:
    import gc
    import logging

    # Start-up allocates many long-lived objects (imports, schemas): collecting
    # while it runs is wasted work. Freeze what start-up made, then collect as usual.
    gc.disable()

    from .serving.connections import raise_fd_limit
    from .serving.logs import hand_over_fastmcp
    from .serving.logs import setup as setup_logs
    from .serving.preflight import StartupError, check_coder, load_settings, unknown_settings

    fd_limit = raise_fd_limit()
    overrides = {"read_only": True} if args.read_only else {}
    transport = None
    sock = None
    stop_emulator: Callable[[], None] | None = None
    try:
        if args.emulator and args.emulator_runtime == "runner":
            if importlib.util.find_spec("claude_agent_sdk") is None:
                raise StartupError("--agent-runtime runner needs claude-agent-sdk; install coder-fleet-mcp[runner]")
            from .emulator.app import REAL_TIME, Emulator, in_background

            # Runners report to the emulator over HTTP, so it serves on a loopback socket of its own.
            emulator = Emulator(virtual=False, timings=REAL_TIME, agent_runtime="runner")
            stop_emulator = in_background(emulator)
            settings = load_settings(coder_url=emulator.url, coder_session_token=emulator.token, **overrides)
        elif args.emulator:
            import httpx

            from .emulator import REAL_TIME, Emulator

            emulator = Emulator(virtual=False, timings=REAL_TIME)
            transport = httpx.ASGITransport(app=emulator.app)
            settings = load_settings(coder_url="http://emulator.local", coder_session_token=emulator.token,
                                     **overrides)
        else:
            settings = load_settings(**overrides)
        sent: Callable[[], str | None] | None = None
        if args.transport == "http":  # over stdio, a refusal imports no FastMCP (front does)
            from .serving.front import sent_token as sent  # what an HTTP request sends (per-user: a Coder token)

        setup_logs((s.get_secret_value() for s in (settings.coder_session_token, settings.auth_token,
                                                     settings.runner_secret) if s),
                   settings.log_level, also=sent)
        for warning in unknown_settings():
            logging.getLogger("fleet_mcp").warning("%s", warning)
        if settings.auth == "coder" and args.transport != "http":
            raise StartupError("FLEET_MCP_AUTH=coder serves each HTTP caller with their own Coder token: "
                               "add --transport http (over stdio, set CODER_SESSION_TOKEN and leave FLEET_MCP_AUTH)")
        if args.transport == "http":
            from .serving.http import refuse_bind

            if reason := refuse_bind(args.host, settings):
                raise StartupError(reason)
            from .serving.listener import listen

            sock = listen(args.host, args.port)
        if settings.audit_log is not None:
            from .serving.audit import cannot_open

            if reason := cannot_open(settings.audit_log):
                raise StartupError(reason)
        who = asyncio.run(check_coder(settings, transport))
    except StartupError as exc:
        gc.enable()
        if sock is not None:
            sock.close()
        if stop_emulator is not None:
            stop_emulator()
        print(f"fleet-mcp: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("fleet_mcp").info("serving the fleet of %s%s", who, " (emulator)" if args.emulator else "")
    from .deadlines import longest_call
    from .server import build_server
    from .serving.run import serve_http, serve_stdio

    hand_over_fastmcp(settings.log_level)

    stopping = asyncio.Event()  # set on the first signal (or stdin's end): waits in flight answer at once
    server = build_server(settings, transport=transport, user=who.user, stopping=stopping)
    from .serving.tuning import tune

    tune()  # start-up's objects frozen, the collector on again; big answers read and kept cheaply
    # SIGTERM and SIGINT: the calls in flight finish (5 s at most), the lifespan closes the Coder client, exit 0.
    try:
        if sock is not None:
            asyncio.run(serve_http(server, settings, args.host, sock, fd_limit=fd_limit, stopping=stopping))
        else:
            asyncio.run(serve_stdio(server, log_level=settings.log_level, stopping=stopping,
                                    patient_grace=longest_call(settings)))
    finally:
        if stop_emulator is not None:
            stop_emulator()  # its runner processes stop with it
    return 0


def preload() -> None:
    """Import what serving takes, by serving one call in memory: a fork server (`fleet_mcp.emulator.forks`, as
    the tests start their `fleet-mcp` processes) does it once for every copy it forks."""
    asyncio.run(_serve_once())


async def _serve_once() -> None:
    import httpx
    import uvicorn  # noqa: F401 - what serving over HTTP imports
    from fastmcp import Client

    from .doctor import main as _doctor  # noqa: F401
    from .emulator.app import Emulator
    from .server import build_server
    from .serving import front, preflight, run  # noqa: F401
    from .settings import Settings

    emulator = Emulator()
    settings = Settings(coder_url="http://emulator.local", coder_session_token=emulator.token)
    async with Client(build_server(settings, transport=httpx.ASGITransport(app=emulator.app))) as client:
        await client.call_tool("list_agents", {}, raise_on_error=False)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "emulator":
        return _emulator(args)
    if args.command == "demo":
        from .demo import main as demo

        return demo()
    if args.command == "runner":
        from .runner.main import main as runner

        return runner(args)
    if args.command == "doctor":
        from .doctor import main as doctor

        return doctor(emulator=args.emulator or args.doctor_emulator, runtime=args.doctor_runtime)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
