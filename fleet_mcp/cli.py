"""The `fleet-mcp` command: serve the tools, or run the emulator.

Each subcommand imports only what it needs, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleet-mcp", description="Run a fleet of Claude Code agents in Coder.")
    sub = parser.add_subparsers(dest="command")
    emu = sub.add_parser("emulator", help="serve a local Coder emulator (demo seed, real time)")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    emu.add_argument("--token", default="demo-token", help="session token of the demo user")
    emu.add_argument("--coder-version", default="2.37", choices=["2.37", "2.36"],
                     help="2.36 adds the Tasks API routes")
    emu.add_argument("--seed", default="demo", choices=["demo", "empty"])
    return parser


def _emulator(args: argparse.Namespace) -> int:
    from .emulator.app import REAL_TIME, Emulator, bind, serve

    emulator = Emulator(token=args.token, virtual=False, timings=REAL_TIME, seed=args.seed,
                        coder_version=args.coder_version)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    print(f"CODER_URL=http://{url_host}:{port}", flush=True)
    print(f"CODER_SESSION_TOKEN={emulator.token}", flush=True)
    asyncio.run(serve(emulator.app, sock))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "emulator":
        return _emulator(args)
    print("fleet-mcp: serving the tools is not available yet; try `fleet-mcp emulator`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
