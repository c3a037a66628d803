"""The process tuned for serving, once, where serving starts: how it allocates, collects and reads.

None of it changes what the server answers, only what an answer costs. A listing of 1,000 real workspaces
is a 47 MB body read from Coder, ~100,000 objects made from it, and all of it dropped once the tool has
answered, at every call and every poll of a wait over the fleet (figures in bench/RESULTS.md).
"""

from __future__ import annotations

import gc
import importlib.util
import sys

__all__ = ["KEPT", "READ_STEP", "keep_freed_memory", "read_in_big_steps", "tune"]

MiB = 1 << 20
KEPT = 64 * MiB  # what the C allocator keeps of freed memory (`keep_freed_memory`)
READ_STEP = 1 * MiB  # the most an HTTP/1.1 connection reads from its socket at once (`read_in_big_steps`)


def tune() -> None:
    """All of this module's tuning; called once start-up is done, before the server serves."""
    gc.freeze()  # what start-up made (imports, schemas) lives for ever: no collection need walk it again
    gc.enable()
    keep_freed_memory()
    read_in_big_steps()
    _sniffio_known_missing()


def keep_freed_memory(kept: int = KEPT) -> bool:
    """Have glibc's allocator keep freed memory for reuse instead of handing it back at once (False: not glibc).

    Reading a listing of 1,000 real workspaces takes ~100-200 MB for a moment: the 47 MB body, read in pieces,
    and the structs decoded from it. By default glibc maps every block over 32 MiB afresh and returns freed memory
    at the top of its heap, so each listing (each poll of a wait) faults ~40,000 pages in again: ~30 ms of
    CPU. Blocks up to `kept` now come from the heap, and up to twice that is kept free in it.
    """
    import ctypes  # here: only the server's start needs it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(mallopt(m_mmap_threshold, kept)) and bool(mallopt(m_trim_threshold, 2 * kept))


def read_in_big_steps(step: int = READ_STEP) -> None:
    """httpcore's HTTP/1.1 connections read up to `step` bytes a time from their socket (its default: 64 KiB).

    The event loop already holds up to 256 KiB per socket read; httpcore hands them on in 64 KiB pieces, each
    through h11, anyio's timeout scope and the answer's stream: 47 MB were ~720 such steps, 60 ms of CPU of
    the 150 ms reading the body took. `READ_NUM_BYTES` is the class's public setting for it; a read returns
    what is there (never waits for a whole step), so small answers are unchanged.
    """
    import httpcore

    httpcore.AsyncHTTP11Connection.READ_NUM_BYTES = max(step, 64 * 1024)


def _sniffio_known_missing() -> None:
    # httpcore runs `import sniffio` each time it makes a lock or semaphore, several times per request.
    # Without sniffio installed (anyio 4 no longer needs it), each failed import searches sys.path again,
    # tenths of a millisecond a request. Recording its absence once makes that import fail at once; httpcore
    # then assumes asyncio, exactly as it does whenever sniffio is missing.
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]
