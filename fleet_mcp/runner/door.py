"""The runner's door: who may call it. An ASGI middleware in front of every route but `/health`.

A call must carry the fleet's key (`X-Fleet-Runner-Key`), which the runner knows only by its SHA-256
(`FLEET_RUNNER_KEY_SHA256`): the verifier can sit in the workspace's files and environment, the key
itself never does. A browser cannot take part: a foreign `Host` (DNS rebinding) and any `Origin` are
refused, and a write must be `application/json`, which no page can send cross-site without a preflight
the runner never answers. See the threat model in specs/runner.md.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["KEY_HEADER", "LOOPBACK_HOSTS", "Door", "verifier_of"]

log = logging.getLogger("fleet_mcp.runner")
KEY_HEADER = "x-fleet-runner-key"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = ("/health",)  # Coder's healthcheck carries no key
WRITES = ("POST", "PUT", "PATCH", "DELETE")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def verifier_of(key: str) -> str:
    """What the runner is given instead of the key: its SHA-256, hex."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _host_name(host: str) -> str:
    """`Host` without its port, lower case, IPv6 brackets dropped."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Door:
    """Refuses what the fleet did not send; `verifier` None (no key configured) refuses every call."""

    def __init__(self, app: ASGIApp, verifier: str | None, allowed_hosts: list[str]) -> None:
        self.app = app
        self.verifier = verifier.strip().lower() if verifier else None
        self.allowed = [h.strip().lower() for h in allowed_hosts if h.strip()]
        self.refused = 0

    def _host_ok(self, host: str) -> bool:
        name = _host_name(host)
        return name in LOOPBACK_HOSTS or any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allowed)

    def _why_not(self, scope: Scope) -> tuple[int, str, str] | None:
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
        if not self._host_ok(headers.get("host", "")):
            return 421, "foreign_host", "this Host is not the runner's (DNS rebinding?)"
        if "origin" in headers:  # the fleet never sends one; a browser always does on a cross-site write
            return 403, "foreign_origin", "requests from web pages are refused"
        if self.verifier is None:
            return 401, "no_key", "this runner has no key (FLEET_RUNNER_KEY_SHA256): it refuses every call"
        presented = headers.get(KEY_HEADER, "")
        if not hmac.compare_digest(verifier_of(presented), self.verifier):
            return 401, "unauthorized", f"a call needs the fleet's key in {KEY_HEADER}"
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if scope["method"] in WRITES and media != "application/json":
            return 415, "unsupported_media_type", "a write's body must be application/json"
        return None

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        refusal = self._why_not(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        self.refused += 1
        log.warning("refused %s %s: %s", scope["method"], scope["path"], code)  # never the headers: they hold keys
        body = json.dumps({"error": code, "message": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
