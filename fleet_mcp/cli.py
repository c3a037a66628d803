"""The `fleet-mcp` command: serve the tools, or run the emulator.

Each subcommand imports only what it needs, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from collections.abc import Callable

from . import __version__

__all__ = ["main"]

SERVE_EPILOG = """\
settings (environment or .env):
  CODER_URL                      your Coder deployment, e.g. https://coder.example.com (required)
  CODER_SESSION_TOKEN            from `coder tokens create` (required unless FLEET_MCP_AUTH=coder)
  FLEET_MCP_APP_SLUG             the AgentAPI app's slug in fleet templates (ccw)
  FLEET_MCP_RUNNER_APP_SLUG      the runner app's slug in fleet templates (fleet)
  FLEET_MCP_REQUEST_TIMEOUT_S    FLEET_MCP_CONNECT_TIMEOUT_S    FLEET_MCP_RETRY_BUDGET_S
  FLEET_MCP_CANCEL_WAIT_S        FLEET_MCP_DELETE_WAIT_S        FLEET_MCP_POLL_INTERVAL_S
  FLEET_MCP_AGENT_ERROR_WAIT_S   FLEET_MCP_CREATE_ADOPT_WAIT_S  FLEET_MCP_TEMPLATE_CACHE_S
  FLEET_MCP_WAIT_POLL_INTERVAL_S FLEET_MCP_PROGRESS_INTERVAL_S
  FLEET_MCP_MAX_AGENTS           the fleet's cap (20; 0 = none)
  FLEET_MCP_AUTOSTOP_MINUTES     default idle autostop of new agents (off)
  FLEET_MCP_MODEL                FLEET_MCP_MAX_TURNS            FLEET_MCP_MAX_COST_USD
                                 defaults for runner agents' model and budgets (unset)
  FLEET_MCP_AUTH_TOKEN           bearer token HTTP clients must send (needed off loopback)
  FLEET_MCP_ALLOWED_HOSTS        extra Host names HTTP clients use, comma-separated ('*' is refused)
  FLEET_MCP_AUDIT_LOG            file for one JSON line per tool call
  FLEET_MCP_HTTP_IDLE_TIMEOUT_S  FLEET_MCP_HTTP_READ_TIMEOUT_S  FLEET_MCP_HTTP_MAX_CONNECTIONS
  FLEET_MCP_SESSION_IDLE_S       FLEET_MCP_MAX_SESSIONS         FLEET_MCP_MAX_SESSIONS_PER_CLIENT
  FLEET_MCP_AUTH                 token (default: one Coder user, CODER_SESSION_TOKEN) or coder (each HTTP
                                 caller sends their own Coder token as Authorization: Bearer)
  FLEET_MCP_AUTH_CACHE_S         how long a caller's checked token is trusted, or a refused one refused (60)
  FLEET_MCP_AUTH_REFUSALS_PER_MINUTE
                                 tokens Coder may refuse per client address a minute (10); beyond: 429
  FLEET_MCP_MAX_USERS            callers whose Coder clients are kept open (256)
  FLEET_MCP_STATELESS_HTTP       stateless streamable HTTP for replicas (default: on with FLEET_MCP_AUTH=coder)
  FLEET_MCP_RATE_SHARE           share of Coder's 512 requests/minute a user's waits may use (0.5)
  FLEET_MCP_LOG_LEVEL            DEBUG, INFO (default), WARNING or ERROR: what the server logs on stderr

exit codes:
  0  stopped cleanly (stdin closed, SIGTERM or SIGINT; calls in flight get 5 s to finish)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleet-mcp", description="Run a fleet of Claude Code agents in Coder.",
                                     epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    sub = parser.add_subparsers(dest="command")
    emu = sub.add_parser("emulator", help="serve a local Coder emulator (demo seed, real time)")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    emu.add_argument("--token", default="demo-token", help="session token of the demo user")
    emu.add_argument("--seed", default="demo", choices=["demo", "empty"],
                     help="demo: user demo, fleet templates and workspaces; empty: only org coder and user demo")
    emu.add_argument("--agent-runtime", default="agentapi", choices=["agentapi", "runner"],
                     help="behind fleet agents: a scripted Claude Code behind AgentAPI (app ccw), or a real "
                          "`fleet-mcp runner` per workspace (app fleet; needs the runner extra)")
    emu.add_argument("--anthropic-base-url", default=None,
                     help="the Messages API runners talk to (default: the emulator's scripted one)")
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

    if args.agent_runtime == "runner" and importlib.util.find_spec("claude_agent_sdk") is None:
        print("fleet-mcp emulator: --agent-runtime runner needs claude-agent-sdk; install coder-fleet-mcp[runner]",
              file=sys.stderr)
        return 2
    emulator = Emulator(token=args.token, virtual=False, timings=REAL_TIME, seed=args.seed,
                        agent_runtime=args.agent_runtime, anthropic_base_url=args.anthropic_base_url)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:  # as the server says it: one line, exit 2
        from .listener import bind_failure

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

    from .connections import raise_fd_limit
    from .logs import setup as setup_logs
    from .preflight import StartupError, check_coder, load_settings, unknown_settings

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
        from .front import sent_token  # what an HTTP request sends, accepted or not (per-user mode: a Coder token)

        setup_logs((s.get_secret_value() for s in (settings.coder_session_token, settings.auth_token) if s),
                   settings.log_level, also=sent_token if args.transport == "http" else None)
        for warning in unknown_settings():
            logging.getLogger("fleet_mcp").warning("%s", warning)
        if settings.auth == "coder" and args.transport != "http":
            raise StartupError("FLEET_MCP_AUTH=coder serves each HTTP caller with their own Coder token: "
                               "add --transport http (over stdio, set CODER_SESSION_TOKEN and leave FLEET_MCP_AUTH)")
        if args.transport == "http":
            from .http import refuse_bind

            if reason := refuse_bind(args.host, settings):
                raise StartupError(reason)
            from .listener import listen

            sock = listen(args.host, args.port)
        if settings.audit_log is not None:
            from .audit import cannot_open

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
    from .server import build_server
    from .serving import serve_http, serve_stdio

    stopping = asyncio.Event()  # set on the first signal (or stdin's end): waits in flight answer at once
    server = build_server(settings, transport=transport, user=who.user, stopping=stopping)
    gc.freeze()
    gc.enable()
    # SIGTERM and SIGINT: the calls in flight finish (5 s at most), the lifespan closes the Coder client, exit 0.
    try:
        if sock is not None:
            asyncio.run(serve_http(server, settings, args.host, sock, fd_limit=fd_limit, stopping=stopping))
        else:
            asyncio.run(serve_stdio(server, log_level=settings.log_level, stopping=stopping))
    finally:
        if stop_emulator is not None:
            stop_emulator()  # its runner processes stop with it
    return 0


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
