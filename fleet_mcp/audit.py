"""The audit log: one JSON line per tool call (`FLEET_MCP_AUDIT_LOG`).

Each line holds `time` (ISO UTC, `Z`), `tool`, `arguments` (strings over 200
characters cut, with a marker saying how much), `duration_ms`, `outcome`
(`ok` | `error`) and `error` (the envelope's error code, or null). Secrets
never reach the file: any argument text holding the Coder session token or the
HTTP auth token is redacted before it is cut.

The file is opened once per server run (the lifespan enters `opened()`),
appended to line-buffered, one write per line under one lock, and closed on
shutdown.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from pydantic import SecretStr

__all__ = ["MAX_TEXT", "REDACTED", "AuditLog", "cannot_open", "cut"]

MAX_TEXT = 200
REDACTED = "[redacted]"
log = logging.getLogger("fleet_mcp")


def cut(value: Any, secrets: Iterable[str] = ()) -> Any:
    """`value` with secrets redacted and every string longer than MAX_TEXT cut, at any depth."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        if len(value) > MAX_TEXT:
            return f"{value[:MAX_TEXT]}…(+{len(value) - MAX_TEXT} chars)"
        return value
    if isinstance(value, dict):
        return {cut(str(k), secrets): cut(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cut(v, secrets) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return cut(str(value), secrets)


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
    """FastMCP middleware writing one line per `tools/call` to `path`."""

    def __init__(self, path: Path, secrets: Iterable[SecretStr | str | None] = ()) -> None:
        self.path = path
        self._secrets = tuple(s.get_secret_value() if isinstance(s, SecretStr) else s
                              for s in secrets if s is not None)
        self._secrets = tuple(s for s in self._secrets if s)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._warned = False

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Hold the file open for one server run (the lifespan enters this)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed below
        with self._lock:
            self._file = file
        try:
            yield
        finally:
            with self._lock:
                self._file = None
                file.close()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                if not self._warned:
                    self._warned = True
                    log.warning("audit log %s is not open; a tool call went unrecorded", self.path)
                return
            self._file.write(line)

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
                "tool": cut(context.message.name, self._secrets),
                "arguments": cut(context.message.arguments or {}, self._secrets),
                "duration_ms": round((time.perf_counter() - t0) * 1000, 1),
                "outcome": outcome,
                "error": error,
            })
