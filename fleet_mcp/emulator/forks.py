"""A fork server: one process imports programs once, then forks a copy of itself to run one for each relay
(relay.py) that asks, as the process the relay would otherwise have started.

Importing fastmcp, mcp or claude-agent-sdk costs 1.5-2 s of CPU a process. The emulator runs Coder's CLI and
the runner in its workspaces this way (Coder's CLI is a Go binary that starts in milliseconds), and the tests
their `fleet-mcp` processes. A program is a module with `preload()` (import what running takes) and
`main(argv) -> int`.

Each copy runs `main` with its relay's stdio, arguments, environment, directory, umask, open-file limits and
ignored signals, in its relay's process group when the relay leads one (so a signal to that group reaches the
copy and what it starts, as it would a process the relay had become), and ends as the process would (normal
interpreter exit).
Its exit code, or the signal that ended it, goes back to the relay, which ends the same way. A copy whose relay
is gone (killed outright, say) is killed, with the relay's group.

Like the runner itself, the server is not dumpable: the environments it is handed hold agents' credentials,
which no process of the same user may read from its memory.

Run as `python -m fleet_mcp.emulator.forks DIRECTORY MODULE...`; it prints `ready` once it listens on
DIRECTORY/forks.sock and ends when its stdin does, killing the copies still running.
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

from .relay import PASSED_ON, SOCKET, not_dumpable

__all__ = ["Copies", "Copy", "serve"]


@dataclass
class Copy:
    """In a forked copy: what its relay asked for, the stdio it handed over, and the program to run."""

    fds: list[int]
    request: dict[str, Any]
    program: ModuleType

    def run(self) -> int:
        """Become the relay's process: its group, stdio, environment, directory, limits, the signals its caller
        ignored; then the program's `main`."""
        request = self.request
        if (group := request.get("group")) is not None:
            with contextlib.suppress(OSError):  # the server sets it too: whichever runs first
                os.setpgid(0, group)
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        with contextlib.suppress(ValueError, OSError):  # a limit above this process's own hard one stays here
            resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
        ignored = set(request.get("ignored") or ())
        for number in PASSED_ON:  # as its relay's caller left them, not as this fork server's was left
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, signal.SIG_IGN if int(number) in ignored else default)
        _reopen_stdio(unbuffered=bool(request["env"].get("PYTHONUNBUFFERED")))
        sys.argv = [request["module"], *request["argv"]]
        code: int = self.program.main(request["argv"])
        return code


def serve(directory: str, modules: list[str]) -> Copy | None:
    """Listen in `directory` and fork copies running `modules` until stdin ends (None); in a copy, what to run."""
    not_dumpable()
    programs = {name: importlib.import_module(name) for name in modules}
    for program in programs.values():
        program.preload()
    gc.freeze()  # what is imported stays out of the copies' collections, which would otherwise copy its pages
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, SOCKET))
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of each child's end
    copies = Copies()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener, selectors.DefaultSelector() as sel:
        listener.bind(os.path.join(directory, SOCKET))
        listener.listen(64)
        for source in (listener, woken, sys.stdin.fileno()):
            sel.register(source, selectors.EVENT_READ)
        print("ready", flush=True)
        while True:
            for key, _ in sel.select():
                if key.fileobj is listener:
                    if (copy := _fork(listener, programs, copies, sel)) is not None:
                        _leave(sel, copies, woken, wake)
                        return copy
                elif key.fileobj == woken:
                    os.read(woken, 512)
                    copies.reap(sel)
                elif isinstance(key.fileobj, socket.socket):  # a relay closed (or died) before its copy ended
                    copies.relay_gone(key.fileobj, sel)
                elif not os.read(sys.stdin.fileno(), 512):  # the caller is done (or gone): so are the copies
                    copies.end(sel)
                    return None


class Copies:
    """The copies running: each one's relay, and the process group it joined (its relay's), if any."""

    def __init__(self) -> None:
        self.relays: dict[int, socket.socket] = {}
        self.groups: dict[int, int] = {}

    def add(self, pid: int, relay: socket.socket, group: int | None, sel: selectors.BaseSelector) -> None:
        self.relays[pid] = relay
        if group is not None:
            with contextlib.suppress(OSError):
                os.setpgid(pid, group)  # the copy does it too: whichever runs first
                self.groups[pid] = group
        try:
            relay.sendall(f"{pid}\n".encode())
            sel.register(relay, selectors.EVENT_READ)
        except OSError:
            self.relay_gone(relay, sel)

    def kill(self, pid: int) -> None:
        """SIGKILL to a copy, and to the relay's group it joined (what the copy started is in it too)."""
        with contextlib.suppress(OSError):
            if pid in self.groups:
                os.killpg(self.groups[pid], signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)

    def relay_gone(self, relay: socket.socket, sel: selectors.BaseSelector) -> None:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(relay)
        for pid, held in self.relays.items():
            if held is relay:
                self.kill(pid)  # reaped, and forgotten, on its SIGCHLD

    def reap(self, sel: selectors.BaseSelector, wait: bool = False) -> None:
        """Tell each ended copy's relay how it ended; `wait`: until every copy has."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if wait else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.groups.pop(pid, None)
            relay = self.relays.pop(pid, None)
            if relay is not None:
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(relay)
                with contextlib.suppress(OSError):
                    relay.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                relay.close()

    def end(self, sel: selectors.BaseSelector) -> None:
        for pid in self.relays:
            self.kill(pid)
        self.reap(sel, wait=True)


def _fork(listener: socket.socket, programs: dict[str, ModuleType], copies: Copies,
          sel: selectors.BaseSelector) -> Copy | None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not data.endswith(b"\n") and (more := conn.recv(1 << 16)):
            data += more
        request = json.loads(data)
        if len(fds) != 3 or request["module"] not in programs:
            raise ValueError("a relay hands over its stdin, stdout and stderr, for a module this server runs")
    except (OSError, ValueError, KeyError, TypeError):
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        conn.close()
        return Copy(fds, request, programs[request["module"]])
    for fd in fds:
        os.close(fd)
    copies.add(pid, conn, request.get("group"), sel)
    return None


def _leave(sel: selectors.BaseSelector, copies: Copies, *fds: int) -> None:
    """In a new copy: drop the fork server's signal handling, its relays and its pipe (the caller's `with`
    closes the listener and the selector)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for conn in copies.relays.values():
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()
    copies.relays.clear()
    copies.groups.clear()
    for fd in fds:
        os.close(fd)


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
    copy = serve(argv[1], argv[2:])
    if copy is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(argv[1], SOCKET))
        return 0
    return copy.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
