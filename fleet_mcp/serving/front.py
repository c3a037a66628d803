"""What the HTTP server answers besides MCP, and what every part reads off a request.

- `Health`, outermost: `GET /healthz` (or HEAD) answers 200 `{"status":"ok"}`,
  503 once draining, for load balancers: no token, no Host check, no Coder
  call, nothing else said, not in the access log.
- `where`: `GET /`'s answer (served by `http.Gate`, after the token checks).
- `mcp_url`: what the start-up log prints; `bearer` / `sent_token`: the token a
  request carries (per-user mode: redacted wherever the server writes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastmcp.server.dependencies import get_http_request
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from .http import Drain

__all__ = ["HEALTH_PATH", "MCP_PATH", "Health", "bearer", "mcp_url", "send_json", "sent_token", "where"]

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"


def mcp_url(host: str, port: int) -> str:
    """Where clients reach the MCP endpoint of a server bound to `host`:`port`."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{MCP_PATH}"


def bearer(header: bytes | str | None) -> str | None:
    """The credentials of an `Authorization: Bearer <credentials>` value, else None."""
    text = header.decode("latin-1") if isinstance(header, bytes) else header or ""
    scheme, _, credentials = text.strip().partition(" ")
    return (credentials.strip() or None) if scheme.lower() == "bearer" else None


def sent_token() -> str | None:
    """The bearer token the current HTTP request carries, accepted or not; None outside an HTTP request."""
    try:
        request = get_http_request()
    except RuntimeError:
        return None
    return bearer(request.headers.get("authorization"))


async def send_json(send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer with `body` as JSON."""
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})


def where(scope: Scope, whose_token: str | None) -> dict[str, str]:
    """`GET /`'s answer: where the MCP endpoint is, as the client reached this server (its Host), and which
    token it needs; nothing secret."""
    host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
    if host is None:
        server = scope.get("server") or ("localhost", None)
        host = f"{server[0]}:{server[1]}" if server[1] else server[0]
    url = f"{scope.get('scheme', 'http')}://{host}{MCP_PATH}"
    auth = f" with the header Authorization: Bearer <token>, the token being {whose_token}." if whose_token else "."
    return {"name": "fleet-mcp", "mcp_endpoint": url, "transport": "streamable HTTP",
            "message": f"This is fleet-mcp, an MCP server: connect an MCP client to {url}, e.g. "
                       f"`claude mcp add --transport http fleet {url}`{auth}",
            "health": HEALTH_PATH}


class Health:
    """Pure ASGI, outermost: `GET /healthz` (or HEAD) answers 200 `{"status":"ok"}`, 503 once draining.

    Before the Host/Origin guard and the token checks: a load balancer probes a replica by its own address and
    holds no token, and the answer says nothing else, so there is nothing to guard. No Coder call: it says the
    process serves, not that Coder answers (a Coder outage must not take every replica out of rotation).
    """

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            if self.drain.draining:
                await send_json(send, 503, {"status": "draining"}, [(b"connection", b"close")])
            else:
                await send_json(send, 200, {"status": "ok"}, [(b"cache-control", b"no-store")])
            return
        await self.app(scope, receive, send)
