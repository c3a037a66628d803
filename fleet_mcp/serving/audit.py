"""The audit log: one JSON line per tool call (`FLEET_MCP_AUDIT_LOG`).

Each line holds `time` (ISO UTC, `Z`), `user` (the caller's Coder username in
per-user mode, else the server's user when known, else null), `tool`, `arguments` (strings over 200
characters, lists and objects over 20 items and anything nested over 8 deep cut, each with a marker saying
how much; arguments whose line would still pass 8 KiB written as only a marker), `duration_ms`, `outcome`
(`ok` | `error`) and `error` (the envelope's error code, or null). Secrets
never reach the file: argument text holding the Coder session token, the HTTP
auth token or (per-user mode) the token the caller sent, or any signed-in
user's, is redacted (`redaction.redact`, any case) before it is cut. Every record is one line for
any reader: line and paragraph separators (U+2028, U+2029, U+0085) and lone
surrogates are written as JSON escapes, never raw.

The file is opened once per server run (the lifespan enters `opened()`) by the
standard library's `WatchedFileHandler`, which reopens it when it has been
moved or removed (rotation); one line is one `write(2)`, so lines stay whole
even from two processes. Writing never changes a call's outcome; failures are
reported on stderr, once a minute at most.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from io import TextIOWrapper
from logging.handlers import WatchedFileHandler
from pathlib import Path
from typing import Any

from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from pydantic import SecretStr

from ..redaction import REDACTED, redact
from ..times import iso
from .front import sent_token
from .tokens import caller

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_LINE", "MAX_TEXT", "REDACTED", "REPORT_EVERY_S", "AuditLog", "cannot_open",
           "cut", "line_of"]

MAX_TEXT = 200  # characters of one string
MAX_ITEMS = 20  # items of one list, keys of one object
MAX_DEPTH = 8  # lists and objects within one another
MAX_LINE = 8_192  # bytes of one line: a refused call of megabytes writes a line of kilobytes at most
REPORT_EVERY_S = 60.0
log = logging.getLogger("fleet_mcp")
# What a reader may take for the end of a line inside a JSON string that json.dumps(ensure_ascii=False) leaves raw
# (it escapes every control character below U+0020), and lone surrogates, which UTF-8 cannot encode.
_RAW_BREAKS = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def cut(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """`value` with secrets redacted (any case), every string longer than MAX_TEXT cut, every list and object
    cut to MAX_ITEMS and nesting to MAX_DEPTH, each cut saying what it left out."""
    return _cut(value, tuple(s for s in secrets if s), 0)


def _cut(value: Any, secrets: tuple[str, ...], depth: int) -> Any:
    if isinstance(value, str):
        value = redact(value, *secrets)
        if len(value) > MAX_TEXT:
            return f"{value[:MAX_TEXT]}…(+{len(value) - MAX_TEXT} chars)"
        return value
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        kind = "an object" if isinstance(value, dict) else "a list"
        return f"…({kind} of {len(value)} items, nested over {MAX_DEPTH} deep)"
    if isinstance(value, dict):
        kept = {_cut(str(k), secrets, depth): _cut(v, secrets, depth + 1)
                for k, v in itertools.islice(value.items(), MAX_ITEMS)}
        if len(value) > MAX_ITEMS:
            kept["…"] = f"(+{len(value) - MAX_ITEMS} keys)"
        return kept
    if isinstance(value, list | tuple):
        items = [_cut(v, secrets, depth + 1) for v in value[:MAX_ITEMS]]
        return items + [f"…(+{len(value) - MAX_ITEMS} items)"] if len(value) > MAX_ITEMS else items
    if value is None or isinstance(value, bool | int | float):
        return value
    return _cut(str(value), secrets, depth)


def line_of(record: dict[str, Any]) -> str:
    """`record` as one line of JSON (UTF-8 text kept readable) that no reader splits, with no newline."""
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    return _RAW_BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def cannot_open(path: Path) -> str | None:
    """Why the audit log cannot be appended to, or None (checked at start-up)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot open FLEET_MCP_AUDIT_LOG={path}: {exc.strerror or exc}"
    return None


def _error_code(text: str) -> str | None:
    """The envelope's `error` from a tool error's text, or None when it is not an envelope."""
    try:
        envelope = json.loads(text)
    except ValueError:
        return None
    code = envelope.get("error") if isinstance(envelope, dict) else None
    return code if isinstance(code, str) else None


class _File(WatchedFileHandler):
    """`WatchedFileHandler` opening the log owner-only (0600), its folder made if need be.

    It learns the file's identity on every open (the library does so only on its own reopens, so after a
    failed one it would reopen at every line), and lets a failure through to `AuditLog.write` instead of
    printing a traceback per line.
    """

    def _open(self) -> TextIOWrapper:
        path = Path(self.baseFilename)
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = open(path, "a", encoding="utf-8", opener=lambda p, flags: os.open(p, flags, 0o600))
        held = os.fstat(stream.fileno())
        self.dev, self.ino = held.st_dev, held.st_ino
        return stream

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # called by emit() while handling the failure: on to AuditLog.write

    def drop(self) -> None:
        """Close the stream after a failure: a line a failed flush left in its buffer is not repeated later;
        the next line opens the file afresh."""
        with self.lock or nullcontext():
            if self.stream is not None:
                with suppress(OSError, ValueError):
                    self.stream.close()
                self.stream = None  # the library's own "not open yet"


class AuditLog(Middleware):
    """FastMCP middleware writing one line per `tools/call` to `path`.

    Writing can never change a call's outcome: a failed write (a full disk,
    a removed folder) is reported on stderr at most once per `REPORT_EVERY_S`,
    with how many lines were lost, and serving goes on. A file moved or removed
    (log rotation) is noticed at the next line, which goes to a new file at `path`.
    """

    def __init__(self, path: Path, secrets: Iterable[SecretStr | str | None] = (), user: str | None = None) -> None:
        self.path = path
        # Whose calls these are when no caller signed in (one Coder user for the server); per-user mode: caller().
        self.user = user
        revealed = (s.get_secret_value() if isinstance(s, SecretStr) else s for s in secrets if s is not None)
        self._secrets = tuple(s for s in revealed if s)
        self._file: _File | None = None
        self._lost = 0
        self._reported_at = -REPORT_EVERY_S

    @property
    def is_open(self) -> bool:
        """Whether a server run holds the log open (between entering and leaving `opened()`)."""
        return self._file is not None

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Hold the file open for one server run (the lifespan enters this)."""
        self._file = _File(self.path, delay=True)
        self._file.setFormatter(logging.Formatter("%(message)s"))
        try:
            try:
                self._file.stream = self._file._open()
            except OSError as exc:
                self._failed(exc.strerror or str(exc))  # the first line tries again
            yield
        finally:
            file, self._file = self._file, None
            with suppress(OSError):  # a buffered line that cannot be written was counted when it failed
                file.close()

    def write(self, record: dict[str, Any]) -> None:
        """Append one line; never raises (a failure is counted and reported, rate-limited)."""
        file = self._file
        if file is None:
            self._failed("the log is not open")
            return
        line = line_of(record)
        if len(line) > MAX_LINE // 4 and (size := len(line.encode())) > MAX_LINE:  # many items, each within bounds
            line = line_of({**record, "arguments": f"…(cut: {size} bytes as a line, over {MAX_LINE})"})
        try:
            file.handle(logging.makeLogRecord({"msg": line}))
        except (OSError, ValueError) as exc:  # ValueError: a stream closed under us
            file.drop()
            self._failed(getattr(exc, "strerror", None) or str(exc))

    def _failed(self, why: str) -> None:
        self._lost += 1
        now = time.monotonic()
        if now - self._reported_at >= REPORT_EVERY_S:
            log.warning("audit log %s: cannot write (%s); %d line(s) lost so far; calls go on unrecorded "
                        "(reported at most once a minute)", self.path, why, self._lost)
            self._reported_at = now

    def scrub(self, value: Any, also: Iterable[str] = ()) -> Any:
        """`value` with the secrets redacted (any case) and long texts cut, at any depth: the server's
        secrets, the token the current HTTP request carries, and `also`."""
        return cut(value, (*self._secrets, sent_token(), *also))

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        outcome, error = "error", None
        try:
            result = await call_next(context)
            if getattr(result, "is_error", False):
                content = getattr(result, "content", None) or []
                error = _error_code(getattr(content[0], "text", "")) if content else None
            else:
                outcome = "ok"
            return result
        except ToolError as exc:
            error = _error_code(str(exc))
            raise
        finally:
            # Per-user mode: every signed-in caller's token, so one pasted by someone else is redacted too.
            users = context.fastmcp_context.lifespan_context.get("users") if context.fastmcp_context else None
            tool, arguments = self.scrub([context.message.name, context.message.arguments or {}],
                                         users.tokens() if users is not None else ())
            self.write({
                "time": iso(started, "milliseconds"),
                "user": caller() or self.user,
                "tool": tool,
                "arguments": arguments,
                "duration_ms": round((time.perf_counter() - t0) * 1000, 1),
                "outcome": outcome,
                "error": error,
            })
