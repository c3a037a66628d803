"""The `fleet-mcp` command: serve the tools, or run the emulator.

Each subcommand imports only what it needs, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleet-mcp", description="Run a fleet of Claude Code agents in Coder.")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio (default) or streamable HTTP at /mcp")
    parser.add_argument("--host", default="127.0.0.1",
                        help="HTTP bind address; anything but loopback needs FLEET_MCP_AUTH_TOKEN")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    parser.add_argument("--emulator", action="store_true",
                        help="serve against an in-process Coder emulator with the demo seed (no Coder needed)")
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
    doctor = sub.add_parser("doctor", help="check Coder, the token and which templates are complete fleet projects")
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
    sock = bind(args.host, args.port)
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

    from .preflight import StartupError, check_coder, load_settings

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    transport = None
    try:
        if args.emulator:
            import httpx

            from .emulator import REAL_TIME, Emulator

            emulator = Emulator(virtual=False, timings=REAL_TIME)
            transport = httpx.ASGITransport(app=emulator.app)
            settings = load_settings(coder_url="http://emulator.local", coder_session_token=emulator.token)
        else:
            settings = load_settings()
        if args.transport == "http":
            from .http import refuse_bind

            if reason := refuse_bind(args.host, settings):
                raise StartupError(reason)
        if settings.audit_log is not None:
            from .audit import cannot_open

            if reason := cannot_open(settings.audit_log):
                raise StartupError(reason)
        who = asyncio.run(check_coder(settings, transport))
    except StartupError as exc:
        gc.enable()
        print(f"fleet-mcp: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("fleet_mcp").info("serving the fleet of %s%s", who, " (emulator)" if args.emulator else "")
    from .server import build_server
    from .serving import serve_http, serve_stdio

    server = build_server(settings, transport=transport)
    gc.freeze()
    gc.enable()
    # SIGTERM and SIGINT: the calls in flight finish (5 s at most), the lifespan closes the Coder client, exit 0.
    if args.transport == "http":
        asyncio.run(serve_http(server, settings, args.host, args.port))
    else:
        asyncio.run(serve_stdio(server))
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

        return doctor(emulator=args.emulator or args.doctor_emulator)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
