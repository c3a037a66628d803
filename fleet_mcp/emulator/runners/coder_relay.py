"""The `coder` a runner workspace runs: hands its stdio, arguments, environment and directory to the emulator's
CLI fork server (coder_forks.py), which forks the emulated CLI for it, and exits with that CLI's exit code.

Run by path (`python -I -S coder_relay.py DIRECTORY ARGS...`: the standard library only, a few milliseconds),
DIRECTORY holding the fork server's socket. A SIGTERM or SIGINT is passed on to the forked CLI. When no fork
server answers, it becomes the CLI itself (`python -m fleet_mcp.emulator.runners.coder_cli ARGS...`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

SOCKET = "coder.sock"  # relative, inside DIRECTORY: a socket's path is limited to about 100 bytes


def main(argv: list[str]) -> int:
    directory, args = argv[1], argv[2:]
    here = os.getcwd()
    request = json.dumps({"argv": args, "env": dict(os.environ), "cwd": here}).encode() + b"\n"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(directory)
        conn.connect(SOCKET)
    except OSError:
        conn.close()
        os.chdir(here)
        os.execv(sys.executable, [sys.executable, "-m", "fleet_mcp.emulator.runners.coder_cli", *args])
    with conn:
        sent = socket.send_fds(conn, [request], [0, 1, 2])
        conn.sendall(request[sent:])
        answer = conn.makefile("rb")
        pid = int(answer.readline() or 0)
        if pid:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda number, _: _pass_on(pid, number))
        code = answer.readline().strip()
    return int(code) if code.lstrip(b"-").isdigit() else 1


def _pass_on(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:  # it has just ended: its exit code is on its way
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
