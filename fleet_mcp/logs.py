"""Serving's logs on stderr: one format, and nothing secret in any line (tokens, MCP session ids)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable

__all__ = ["Redact", "setup"]

# MCP session ids (the SDK mints uuid4().hex) are bearer-like: whoever holds one can use the session.
_SESSION_ID = re.compile(r"\b[0-9a-f]{32}\b")
# What a client sent as a session id may be anything (even a token): the SDK logs it after "session ID:".
_SENT_SESSION = re.compile(r"(?i)(session id:?\s+|session:\s+)\S+")


class Redact(logging.Filter):
    """Rewrites each record's final message with the secrets (any case) and session ids replaced."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        texts = [s for s in secrets if s]
        self._secrets = re.compile("|".join(map(re.escape, texts)), re.IGNORECASE) if texts else None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = _SESSION_ID.sub("[session]", message)
        if record.name.startswith("mcp.server.streamable_http"):
            clean = _SENT_SESSION.sub(r"\1[session]", clean)
        if self._secrets is not None:
            clean = self._secrets.sub("[redacted]", clean)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def setup(secrets: Iterable[str] = (), level: str = "INFO") -> None:
    """Log `level` (FLEET_MCP_LOG_LEVEL) and up to stderr through `Redact` (call once, before serving)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(Redact(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("fastmcp").setLevel(level)  # FastMCP keeps a stderr handler of its own, not the root's
    for noisy in ("httpx", "httpcore"):  # a line per request: only where DEBUG is asked for
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
