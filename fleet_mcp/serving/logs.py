"""Serving's logs on stderr: one format, and nothing secret in any line (tokens, MCP session ids)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable

from ..redaction import redact

__all__ = ["OneLine", "Redact", "hand_over_fastmcp", "setup"]

# MCP session ids (the SDK mints uuid4().hex) are bearer-like: whoever holds one can use the session.
_SESSION_ID = re.compile(r"\b[0-9a-f]{32}\b")
# What a client sent as a session id may be anything (even a token): the SDK logs it after "session ID:".
_SENT_SESSION = re.compile(r"(?i)(session id:?\s+|session:\s+)\S+")


class Redact(logging.Filter):
    """Rewrites each record's final message with session ids replaced and the secrets redacted
    (`redaction.redact`): `secrets`, and what `also()` names at the time (the token the HTTP request being
    served carries, in per-user mode)."""

    def __init__(self, secrets: Iterable[str] = (), also: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        self._secrets = tuple(s for s in secrets if s)
        self._also = also

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = _SESSION_ID.sub("[session]", message)
        if record.name.startswith("mcp.server.streamable_http"):
            clean = _SENT_SESSION.sub(r"\1[session]", clean)
        secrets = (*self._secrets, self._also() if self._also is not None else None)
        clean = redact(clean, *secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:  # the formatter keeps what is set here
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, *secrets)
        return True


class OneLine(logging.Formatter):
    """`LEVEL logger: message`, one line a record whoever logs it: line breaks inside a message are written
    `\\n`, and an exception adds its type, with its trace (as `Redact` left it) only when `traces`."""

    def __init__(self, traces: bool = False) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")  # as the README's Logs section says
        self._traces = traces

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        line = self.formatMessage(record)
        if record.exc_info and record.exc_info[0] is not None:
            line += f" ({record.exc_info[0].__name__})"
            if self._traces:
                line += " " + (record.exc_text or self.formatException(record.exc_info))
        return line.replace("\r", "").replace("\n", "\\n")


def setup(secrets: Iterable[str] = (), level: str = "INFO", also: Callable[[], str | None] | None = None) -> None:
    """Log `level` (FLEET_MCP_LOG_LEVEL) and up to stderr through `Redact` (call once, before serving)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine(traces=level == "DEBUG"))
    handler.addFilter(Redact(secrets, also))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore"):  # a line per request: only where DEBUG is asked for
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)


def hand_over_fastmcp(level: str = "INFO") -> None:
    """FastMCP's records to the root's handler at `level` (call once the server is built, before serving).

    FastMCP gives its logger Rich handlers of its own (at import, and again whenever a server runs with a log
    level) that do not propagate: turned off through its setting, its records reach the root's handler. Kept
    apart from `setup` so that a server refusing to start never imports FastMCP (a second of CPU)."""
    import fastmcp

    fastmcp.settings.log_enabled = False
    ours = logging.getLogger("fastmcp")
    ours.handlers.clear()
    ours.propagate = True
    ours.setLevel(level)
