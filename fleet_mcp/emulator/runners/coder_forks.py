"""The emulated `coder` CLI at the cost of a fork: one process per emulator imports the CLI (coder_cli.py: fastmcp
and mcp, about 2 s of CPU) once, then forks a copy for each `coder` a runner starts (coder_relay.py hands over
its stdio, arguments, environment and directory) and tells that relay the copy's pid, then its exit code.

Coder's CLI is a Go binary that starts in milliseconds; a Python process importing fastmcp per runner was half
of a runner workspace's CPU. Each copy runs `coder_cli.main` as the process would, with the relay's stdio.

Run as `python -m fleet_mcp.emulator.runners.coder_forks DIRECTORY` in a session of its own (the copies share
its process group, so one group kill takes all); it prints `ready` once it listens on DIRECTORY/coder.sock and
ends when its stdin does.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import sys
import traceback

from . import coder_cli
from .coder_relay import SOCKET

__all__ = ["serve"]


def serve(directory: str) -> int:
    coder_cli.preload()
    gc.freeze()  # what is imported stays out of the copies' collections, which would otherwise copy its pages
    os.chdir(directory)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET)
    listener.listen(64)
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of each child's end
    relays: dict[int, socket.socket] = {}  # a copy's pid -> its relay
    with selectors.DefaultSelector() as sel:
        for source in (listener, woken, sys.stdin.fileno()):
            sel.register(source, selectors.EVENT_READ)
        print("ready", flush=True)
        while True:
            for key, _ in sel.select():
                if key.fileobj is listener:
                    _fork(listener, relays, sel)
                elif key.fileobj == woken:
                    os.read(woken, 512)
                    _reap(relays)
                elif not os.read(sys.stdin.fileno(), 512):  # the emulator is done (or gone)
                    return 0


def _fork(listener: socket.socket, relays: dict[int, socket.socket], sel: selectors.BaseSelector) -> None:
    conn, _ = listener.accept()
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not data.endswith(b"\n") and (more := conn.recv(1 << 16)):
            data += more
        request = json.loads(data)
        if len(fds) != 3:
            raise ValueError("a relay hands over its stdin, stdout and stderr")
    except (OSError, ValueError):
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        sel.close()
        listener.close()
        for other in relays.values():
            other.close()
        conn.close()
        _run(fds, request)
    for fd in fds:
        os.close(fd)
    relays[pid] = conn
    with contextlib.suppress(OSError):
        conn.sendall(f"{pid}\n".encode())


def _run(fds: list[int], request: dict) -> None:
    """In the copy: become the relay's `coder` and run the CLI; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = ["coder", *request["argv"]]
        code = coder_cli.main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - as a process would: the trace on stderr, exit 1
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(relays: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = relays.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
