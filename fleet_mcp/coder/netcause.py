"""Why no answer came from Coder, told apart: refused, unknown host, TLS, timeout, or something else.

`cause` reads an httpx error (and the OS or TLS error under it) into a kind and
a short phrase; `fix` is the one thing to check for each kind, for start-up
lines and `doctor`.
"""

from __future__ import annotations

import socket
import ssl
from typing import Literal

import httpx

__all__ = ["Kind", "cause", "fix"]

Kind = Literal["refused", "dns", "tls", "timeout", "dropped", "other"]

_FIX: dict[Kind, str] = {
    "refused": "is Coder running there, and are CODER_URL's host and port right?",
    "dns": "check the host name in CODER_URL (and this machine's DNS)",
    "tls": "check CODER_URL's scheme (http or https) and that the certificate is trusted here "
           "(SSL_CERT_FILE names an extra CA bundle)",
    "timeout": "is the host reachable from here (firewall, VPN, proxy)? FLEET_MCP_CONNECT_TIMEOUT_S and "
               "FLEET_MCP_REQUEST_TIMEOUT_S set the patience",
    "dropped": "is CODER_URL a Coder deployment, and is a proxy in between cutting connections?",
    "other": "check CODER_URL",
}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def cause(exc: httpx.HTTPError) -> tuple[Kind, str]:
    """The kind of failure and a short phrase for it (no URL, no secret)."""
    chain = _chain(exc)
    if any(isinstance(e, ssl.SSLError) for e in chain):
        tls = next(e for e in chain if isinstance(e, ssl.SSLError))
        reason = getattr(tls, "reason", None) or type(tls).__name__
        return "tls", f"TLS handshake failed ({reason})"
    if any(isinstance(e, socket.gaierror) for e in chain) or (
            isinstance(exc, httpx.ConnectError) and "name or service not known" in str(exc).lower()):
        return "dns", "host name not found"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", "connecting timed out" if isinstance(exc, httpx.ConnectTimeout) else "timed out"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "connection refused" in str(exc).lower():
        return "refused", "connection refused"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return "dropped", "connection dropped before an answer"
    return "other", type(exc).__name__


def fix(kind: Kind) -> str:
    """What to check for a failure of this kind."""
    return _FIX[kind]
