"""A fork server: one process imports a program once, then forks a copy of itself to run that program for each
relay (relay.py) that asks, as the process the relay would otherwise have started.

Importing fastmcp and mcp costs about 2 s of CPU a process. The emulator runs Coder's CLI in every runner
workspace this way (Coder's is a Go binary that starts in milliseconds), and the tests their `fleet-mcp`
processes. A program is a module with `preload()` (import what running takes) and `main(argv) -> int`.

Each copy runs `main` with its relay's stdio, arguments, environment, directory, umask and open-file limits, and
ends as the process would (normal interpreter exit); its exit code, or the signal that ended it, goes back to
the relay, which ends the same way. A copy whose relay is gone (killed with SIGKILL, say) is killed too.

Run as `python -m fleet_mcp.emulator.forks DIRECTORY MODULE`; it prints `ready` once it listens on
DIRECTORY/forks.sock and ends when its stdin does, killing the copies still running. Copies share its process
group: one group kill takes all.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import resource
import selectors
import signal
import socket
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .relay import SOCKET

__all__ = ["Copy", "serve"]


@dataclass
class Copy:
    """In a forked copy: what its relay asked for, and the stdio it handed over."""

    fds: list[int]
    request: dict[str, Any]

    def run(self, program: ModuleType) -> int:
        """Become the relay's process: its stdio, environment, directory, limits; then the program's `main`."""
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
            if fd > 2:
                os.close(fd)
        request = self.request
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        with contextlib.suppress(ValueError, OSError):  # a limit above this process's own hard one stays here
            resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
        _reopen_stdio(unbuffered=bool(request["env"].get("PYTHONUNBUFFERED")))
        sys.argv = [request["module"], *request["argv"]]
        code: int = program.main(request["argv"])
        return code


def serve(directory: str, module: str) -> tuple[ModuleType, Copy | None]:
    """Listen in `directory` and fork `module`'s copies until stdin ends (None), or, in a copy, what to run."""
    program = importlib.import_module(module)
    program.preload()
    gc.freeze()  # what is imported stays out of the copies' collections, which would otherwise copy its pages
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, SOCKET))
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of each child's end
    relays: dict[int, socket.socket] = {}  # a copy's pid -> its relay
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener, selectors.DefaultSelector() as sel:
        listener.bind(os.path.join(directory, SOCKET))
        listener.listen(64)
        for source in (listener, woken, sys.stdin.fileno()):
            sel.register(source, selectors.EVENT_READ)
        print("ready", flush=True)
        while True:
            for key, _ in sel.select():
                if key.fileobj is listener:
                    if (copy := _fork(listener, module, relays, sel)) is not None:
                        _leave(sel, relays, woken, wake)
                        return program, copy
                elif key.fileobj == woken:
                    os.read(woken, 512)
                    _reap(relays, sel)
                elif isinstance(key.fileobj, socket.socket):  # a relay closed (or died) before its copy ended
                    _relay_gone(key.fileobj, relays, sel)
                elif not os.read(sys.stdin.fileno(), 512):  # the caller is done (or gone): so are the copies
                    _end_copies(relays, sel)
                    return program, None


def _fork(listener: socket.socket, module: str, relays: dict[int, socket.socket],
          sel: selectors.BaseSelector) -> Copy | None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not data.endswith(b"\n") and (more := conn.recv(1 << 16)):
            data += more
        request = json.loads(data)
        if len(fds) != 3 or request["module"] != module:
            raise ValueError("a relay hands over its stdin, stdout and stderr, for this server's module")
    except (OSError, ValueError, KeyError, TypeError):
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        conn.close()
        return Copy(fds, request)
    for fd in fds:
        os.close(fd)
    relays[pid] = conn
    try:
        conn.sendall(f"{pid}\n".encode())
        sel.register(conn, selectors.EVENT_READ)
    except OSError:
        _relay_gone(conn, relays, sel)
    return None


def _leave(sel: selectors.BaseSelector, relays: dict[int, socket.socket], *fds: int) -> None:
    """In a new copy: drop the fork server's signal handling, its relays and its pipe (the caller's `with`
    closes the listener and the selector)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for conn in relays.values():
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()
    relays.clear()
    for fd in fds:
        os.close(fd)


def _relay_gone(conn: socket.socket, relays: dict[int, socket.socket], sel: selectors.BaseSelector) -> None:
    with contextlib.suppress(KeyError, ValueError):
        sel.unregister(conn)
    for pid, held in relays.items():
        if held is conn:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # reaped, and dropped from `relays`, on its SIGCHLD


def _reap(relays: dict[int, socket.socket], sel: selectors.BaseSelector, wait: bool = False) -> None:
    """Tell each ended copy's relay how it ended; `wait`: until every copy has."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = relays.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn)
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _end_copies(relays: dict[int, socket.socket], sel: selectors.BaseSelector) -> None:
    for pid in relays:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _reap(relays, sel, wait=True)


def _reopen_stdio(unbuffered: bool) -> None:
    """New standard streams on fds 0-2 (now the relay's), buffered as a process started with this environment
    would buffer them; the old objects never close their fds."""
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = open(0, encoding=old[0].encoding, errors=old[0].errors, closefd=False)
    for fd, stream in ((1, old[1]), (2, old[2])):
        binary = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        text = io.TextIOWrapper(binary, encoding=stream.encoding, errors=stream.errors, write_through=unbuffered,
                                line_buffering=fd == 2 or os.isatty(fd))
        if fd == 1:
            sys.stdout = text
        else:
            sys.stderr = text


def main(argv: list[str]) -> int:
    program, copy = serve(argv[1], argv[2])
    if copy is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(argv[1], SOCKET))
        return 0
    return copy.run(program)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
