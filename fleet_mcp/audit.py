"""The audit log: one JSON line per tool call (`FLEET_MCP_AUDIT_LOG`).

Each line holds `time` (ISO UTC, `Z`), `user` (the caller's Coder username in
per-user mode, else the server's user when known, else null), `tool`, `arguments` (strings over 200
characters cut, with a marker saying how much), `duration_ms`, `outcome`
(`ok` | `error`) and `error` (the envelope's error code, or null). Secrets
never reach the file: any argument text holding the Coder session token or the
HTTP auth token is redacted before it is cut.

The file is opened once per server run (the lifespan enters `opened()`),
appended to with one `write(2)` per line under one lock, reopened when it has
been moved or removed (rotation), and closed on shutdown. Writing never
changes a call's outcome; failures are reported on stderr, once a minute at most.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from pydantic import SecretStr

from .users import caller

__all__ = ["MAX_TEXT", "REDACTED", "REPORT_EVERY_S", "AuditLog", "cannot_open", "cut"]

MAX_TEXT = 200
REPORT_EVERY_S = 60.0
REDACTED = "[redacted]"
log = logging.getLogger("fleet_mcp")


def cut(value: Any, secrets: Iterable[str] | re.Pattern[str] | None = ()) -> Any:
    """`value` with secrets redacted and every string longer than MAX_TEXT cut, at any depth.

    `secrets`: texts to redact (any case), or one compiled pattern matching them.
    """
    if secrets is not None and not isinstance(secrets, re.Pattern):
        texts = [s for s in secrets if s]
        secrets = re.compile("|".join(map(re.escape, texts)), re.IGNORECASE) if texts else None
    return _cut(value, secrets)


def _cut(value: Any, secrets: re.Pattern[str] | None) -> Any:
    if isinstance(value, str):
        if secrets is not None:
            value = secrets.sub(REDACTED, value)
        if len(value) > MAX_TEXT:
            return f"{value[:MAX_TEXT]}…(+{len(value) - MAX_TEXT} chars)"
        return value
    if isinstance(value, dict):
        return {_cut(str(k), secrets): _cut(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(v, secrets) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _cut(str(value), secrets)


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
        # Case-insensitive: an upper-cased copy of a token is still the token.
        self._scrub = re.compile("|".join(map(re.escape, self._secrets)), re.IGNORECASE) if self._secrets else None
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._open = False
        self._lost = 0
        self._reported_at = -REPORT_EVERY_S

    @property
    def is_open(self) -> bool:
        """Whether a server run holds the log open (between entering and leaving `opened()`)."""
        return self._open

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Hold the file open for one server run (the lifespan enters this)."""
        with self._lock:
            self._open = True
            try:
                self._reopen()
            except OSError as exc:
                self._failed(exc.strerror or str(exc))
        try:
            yield
        finally:
            with self._lock:
                self._open = False
                self._close()

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _reopen(self) -> None:
        self._close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _moved(self) -> bool:
        assert self._fd is not None
        try:
            at_path = os.stat(self.path)
        except OSError:
            return True
        held = os.fstat(self._fd)
        return (at_path.st_dev, at_path.st_ino) != (held.st_dev, held.st_ino)

    def write(self, record: dict[str, Any]) -> None:
        """Append one line; never raises (a failure is counted and reported, rate-limited)."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if not self._open:
                self._failed("the log is not open")
                return
            try:
                if self._fd is None or self._moved():
                    self._reopen()
                assert self._fd is not None
                os.write(self._fd, line)  # O_APPEND, one write per line: whole lines, even from two processes
            except OSError as exc:
                self._failed(exc.strerror or str(exc))

    def _failed(self, why: str) -> None:
        self._lost += 1
        now = time.monotonic()
        if now - self._reported_at >= REPORT_EVERY_S:
            log.warning("audit log %s: cannot write (%s); %d line(s) lost so far; calls go on unrecorded "
                        "(reported at most once a minute)", self.path, why, self._lost)
            self._reported_at = now

    def scrub(self, value: Any) -> Any:
        """`value` with the secrets redacted (any case) and long texts cut, at any depth."""
        return cut(value, self._scrub)

    async def on_call_tool(self, context: MiddlewareContext, call_next):
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
            self.write({
                "time": started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "user": caller() or self.user,
                "tool": self.scrub(context.message.name),
                "arguments": self.scrub(context.message.arguments or {}),
                "duration_ms": round((time.perf_counter() - t0) * 1000, 1),
                "outcome": outcome,
                "error": error,
            })
