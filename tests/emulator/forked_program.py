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
                          "pid": os.getpid(), "group": os.getpgrp(), "preloaded": PRELOADED}))
        print("to stderr", file=sys.stderr)
        return int(rest[0])
    if what == "trap":  # SIGTERM handled: say so, exit 3; SIGINT as Python's default (KeyboardInterrupt)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    # Each signal writes a byte here as it lands, so one that lands before the wait below begins still ends
    # it (`signal.pause()` would sleep through a signal sent the moment the pid is printed).
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    if what == "fail":
        raise RuntimeError("a failure, as any process shows it")
    while True:  # "wait" and "trap": until a signal ends it (its handler runs once select returns)
        select.select([woken], [], [])
        os.read(woken, 512)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
