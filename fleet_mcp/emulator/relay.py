"""A process that a fork server (forks.py) runs for its caller: this relay hands its stdio, arguments, environment,
directory, umask, open-file limits and process group (when it leads one) to the fork server listening in
DIRECTORY, which forks a copy of itself that has already imported MODULE and runs it as `python -m MODULE
ARGS...` would. The relay passes on each signal a process is sent, and ends as the copy ended: its exit code, or
the signal that killed it. It is not dumpable (its environment may hold an agent's credentials, as the runner's
does).

Run by path (`python -I -S relay.py DIRECTORY MODULE ARGS...`: the standard library only, a few milliseconds).
When no fork server answers, it becomes `python -m MODULE ARGS...` itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import sys

SOCKET = "forks.sock"  # relative, inside DIRECTORY: a socket's path is limited to about 100 bytes
PR_SET_DUMPABLE = 4
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def not_dumpable() -> None:
    """As the runner makes itself (runner/main.py): no process of the same user reads this one's memory."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def main(argv: list[str]) -> int:
    not_dumpable()
    directory, module, args = argv[1], argv[2], argv[3:]
    here = os.getcwd()
    group = os.getpgrp()
    umask = os.umask(0o022)
    os.umask(umask)
    # Signals its caller started it ignoring (as a shell's background job ignores SIGINT): `python -m MODULE`
    # would start ignoring them too, so the copy does. They are still passed on: a program may handle them
    # (the fleet's server does), as the process itself would then hear them.
    ignored = [int(n) for n in PASSED_ON if signal.getsignal(n) == signal.SIG_IGN]
    request = json.dumps({"module": module, "argv": args, "env": dict(os.environ), "cwd": here, "umask": umask,
                          "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
                          "group": group if group == os.getpid() else None, "ignored": ignored}).encode() + b"\n"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(directory)
        conn.connect(SOCKET)
    except OSError:
        conn.close()
        os.chdir(here)
        os.execv(sys.executable, [sys.executable, "-m", module, *args])
    with conn:
        # Caught from here on: the copy may run (and its caller signal this relay) before its pid is known
        # here; what comes meanwhile is passed on once it is.
        copy = _Copy()
        for number in PASSED_ON:
            signal.signal(number, copy.signalled)
        sent = socket.send_fds(conn, [request], [0, 1, 2])
        conn.sendall(request[sent:])
        answer = conn.makefile("rb")
        copy.started(int(answer.readline() or 0))
        code = answer.readline().strip()
    if code.lstrip(b"-").isdigit():
        return _end_as(int(code))
    ending = [number for number in copy.held if number not in ignored]
    return _end_as(-ending[0]) if ending else 1  # no copy ran: this relay ends as the first signal it heeds said


class _Copy:
    """The copy's pid once the fork server says it, and the signals this relay was sent before then."""

    def __init__(self) -> None:
        self.pid = 0
        self.held: list[int] = []

    def signalled(self, number: int, _frame: object) -> None:
        if self.pid:
            _pass_on(self.pid, number)
        else:
            self.held.append(number)

    def started(self, pid: int) -> None:
        self.pid = pid
        for number in self.held if pid else ():
            _pass_on(pid, number)


def _pass_on(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:  # it has just ended: its exit code is on its way
        pass


def _end_as(code: int) -> int:
    """Exit with `code`; a negative one is the signal that ended the copy, which this process then dies of too."""
    if code >= 0:
        return code
    if -code != signal.SIGKILL:  # the one that cannot be handled: no default to restore
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code  # a signal whose default is not to end the process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
