"""The emulator's reaper: takes down what the emulator started once the emulator is gone, however it went.

Run by path (`python -I -S reaper.py ROOT`: the standard library only, nothing of fleet_mcp, in its own
session), it reads lines from stdin: `+PGID` when the emulator started a runner in process group PGID,
`-PGID` once it stopped it. When stdin ends — the emulator closed it, or died (even by SIGKILL: the kernel
closes its pipe) — it kills every group still listed (each runner and the Claude Code it started) and
removes the scratch directory ROOT.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time


def main(argv: list[str]) -> int:
    root = argv[1]
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        word = line.strip()
        with contextlib.suppress(ValueError):
            (groups.add if word.startswith(b"+") else groups.discard)(int(word[1:]))
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for _ in range(10):  # a process killed a moment ago may still be leaving a file behind
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.exists(root):
            break
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
