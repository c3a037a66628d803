"""A program for the fork server's tests (test_forks.py): `main(argv)` does what its first argument says."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys

PRELOADED: list[str] = []


def preload() -> None:
    PRELOADED.append("yes")


def main(argv: list[str]) -> int:
    what, rest = argv[0], argv[1:]
    if what == "report":  # what the process it runs as was handed; exit with the code asked for
        umask = os.umask(0)
        print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "umask": umask, "env": os.environ.get("PROBE"),
                          "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "stdin": sys.stdin.read(),
                          "pid": os.getpid(), "group": os.getpgrp(), "preloaded": PRELOADED,
                          "signals": {sig.name: _disposition(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                                              signal.SIGHUP)}}))
        print("to stderr", file=sys.stderr)
        return int(rest[0])
    if what == "trap":  # SIGTERM handled: say so, exit 3; SIGINT as Python's default (KeyboardInterrupt)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    if what == "echo":  # says each SIGINT and SIGTERM that reaches it; a SIGTERM then ends it (exit 4)
        signal.signal(signal.SIGINT, _echo)
        signal.signal(signal.SIGTERM, _echo)
    # Each signal writes a byte here as it lands, so one that lands before the wait below begins still ends
    # it (`signal.pause()` would sleep through a signal sent the moment the pid is printed).
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    if what == "fail":
        raise RuntimeError("a failure, as any process shows it")
    while True:  # "wait", "trap", "echo": until a signal ends it (its handler runs once select returns)
        select.select([woken], [], [])
        os.read(woken, 512)


def _echo(number: int, _frame: object) -> None:
    print(signal.Signals(number).name, flush=True)
    if number == signal.SIGTERM:
        sys.exit(4)


def _disposition(sig: signal.Signals) -> str:
    handler = signal.getsignal(sig)
    return "ignored" if handler == signal.SIG_IGN else "default" if handler in (
        signal.SIG_DFL, signal.default_int_handler) else "handled"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
