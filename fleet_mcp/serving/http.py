"""Serving over HTTP safely: loopback unless a token is set, bearer auth, Host/Origin checks, draining.

- `refuse_bind` says why a bind address is refused: anything but loopback
  needs `FLEET_MCP_AUTH_TOKEN`.
- `build_app` is FastMCP's streamable-HTTP app at /mcp with FastMCP's own
  Host/Origin guard in strict mode (421 for a Host that is not the bound
  host, localhost, 127.0.0.1, [::1] or one of `FLEET_MCP_ALLOWED_HOSTS`; 403
  for an Origin of any other host), then `Gate` (pure ASGI, so streaming
  responses pass untouched): the bearer token, compared in constant time, and
  the drain on shutdown; `GET /` says where the MCP endpoint is, and any other
  path answers 404 saying it. In front of
  all that, `front.Health` answers load balancers' `GET /healthz`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from ipaddress import ip_address

from fastmcp import FastMCP
from pydantic import SecretStr
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..settings import Settings
from .front import MCP_PATH, Health, bearer, where
from .front import send_json as _send_json

__all__ = ["Drain", "Gate", "allowed_hosts", "allowed_origins", "build_app", "is_loopback", "refuse_bind"]

access = logging.getLogger("fleet_mcp.access")


def is_loopback(host: str) -> bool:
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_bind(host: str, settings: Settings) -> str | None:
    """Why `fleet-mcp --transport http --host <host>` must not start, or None."""
    if is_loopback(host) or settings.auth_token is not None or settings.auth == "coder":
        return None  # per-user mode: Coder checks every request's token
    return (f"refusing to serve HTTP on {host}, which is not a loopback address, without "
            "FLEET_MCP_AUTH_TOKEN: set it (clients then send Authorization: Bearer <token>) or bind 127.0.0.1")


def allowed_hosts(host: str, settings: Settings) -> list[str]:
    """Host headers accepted besides localhost, 127.0.0.1 and [::1] (FastMCP's defaults)."""
    hosts = list(settings.allowed_hosts)
    try:
        unspecified = ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        unspecified = False
    if not unspecified and host not in hosts:
        hosts.append(host)  # FastMCP also accepts the address a connection arrived on
    return hosts


def allowed_origins(settings: Settings) -> list[str]:
    """Browser origins of the allow-listed names, on any scheme and port (loopback and same-origin pass anyway)."""
    return [f"{scheme}://{name}:*" for name in settings.allowed_hosts for scheme in ("http", "https")]


class Drain:
    """Set once on shutdown: streams that only wait for server messages end, new requests get 503."""

    def __init__(self) -> None:
        self.draining = False
        self._event: asyncio.Event | None = None

    def _wait_event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
            if self.draining:
                self._event.set()
        return self._event

    def start(self) -> None:
        """Begin draining (call on the event loop's thread, outside a signal handler)."""
        self.draining = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        await self._wait_event().wait()


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def _challenge(verdict: bool | None) -> bytes:
    error = b'error="invalid_token", ' if verdict is False else b""
    return (b'Bearer realm="fleet-mcp", ' + error +
            b'error_description="send the header Authorization: Bearer <token> (FLEET_MCP_AUTH_TOKEN); '
            b'this server offers no OAuth"')


class Gate:
    """Pure ASGI middleware: `Authorization: Bearer <token>` when a token is set; the drain on shutdown.

    `per_user` (FLEET_MCP_AUTH=coder): FastMCP's verifier has already checked the caller's Coder token;
    /mcp answers its own 401s, the Gate answers 401 on every other path for a token Coder refused and
    503 when Coder could not be asked.
    """

    def __init__(self, app: ASGIApp, token: SecretStr | None = None, drain: Drain | None = None,
                 per_user: bool = False) -> None:
        self.app = app
        self.per_user = per_user
        # Only digests are kept and compared: constant time, whatever the lengths.
        self._digest = _digest(token.get_secret_value().encode()) if token is not None else None
        self.drain = drain or Drain()

    def authorized(self, scope: Scope) -> bool | None:
        """True when the bearer token matches, False when it is wrong, None when there is none."""
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if header is None or self._digest is None:
            return None
        scheme, _, credentials = header.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not credentials.strip():
            return None
        return hmac.compare_digest(_digest(credentials.strip()), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan (and no websockets are served)
            return
        status = 0

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, noted)
        finally:
            # The access log: the path without its query string (a token may sit there), no headers.
            client = scope.get("client") or ("-", 0)
            access.info('%s:%s "%s %s" %s', client[0], client[1], scope["method"], scope["path"], status or "-")

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.drain.draining:
            await _send_json(send, 503, {"error": "unavailable", "message": "The server is shutting down.",
                                         "details": {}}, [(b"connection", b"close"), (b"retry-after", b"1")])
            return
        if self.per_user and await self._refused(scope, send):
            return
        if scope["path"].startswith("/.well-known/"):
            # No OAuth here: a discovery document would send clients after a flow this server does not offer.
            whose = ("your own Coder token (`coder tokens create`)" if self.per_user
                     else "the server's FLEET_MCP_AUTH_TOKEN")
            await _send_json(send, 404, {
                "error": "not_found", "message": "This server offers no OAuth; send the header "
                f"Authorization: Bearer <token>, the token being {whose}.", "details": {}})
            return
        if scope["path"] == "/" and scope["method"] in ("GET", "HEAD"):
            needs = "the server's FLEET_MCP_AUTH_TOKEN" if self._digest is not None else None
            await _send_json(send, 200, where(scope, "each caller's own Coder token" if self.per_user else needs))
            return
        if scope["path"].rstrip("/") != MCP_PATH:  # a bare "Not Found" leaves a client that missed /mcp lost
            endpoint = where(scope, None)["mcp_endpoint"]
            await _send_json(send, 404, {
                "error": "not_found", "message": f"Nothing is served at this path: fleet-mcp's MCP endpoint is "
                f"{endpoint} (streamable HTTP); point the MCP client there.",
                "details": {"mcp_endpoint": endpoint}})
            return
        if self._digest is not None:
            verdict = self.authorized(scope)
            if not verdict:
                await _send_json(send, 401, {
                    "error": "unauthorized",
                    "message": "This server needs the header Authorization: Bearer <token>, the token being "
                               "the server's FLEET_MCP_AUTH_TOKEN; "
                               + ("the token sent is wrong." if verdict is False else "none was sent."),
                    "details": {"header": "Authorization", "scheme": "Bearer"}},
                    [(b"www-authenticate", _challenge(verdict))])
                return
        if scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "complete": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        await self.app(scope, self._until_drained(receive), tracked)
        if state["started"] and not state["complete"] and self.drain.draining:
            # A stream ended by the drain: close it properly (the client did not go away).
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _refused(self, scope: Scope, send: Send) -> bool:
        """Per-user mode: answer a refused token (off /mcp) or a token Coder could not check; True if answered."""
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

        from .tokens import LIMITED, UNVERIFIED

        user = scope.get("user")
        if isinstance(user, AuthenticatedUser):
            claims = user.access_token.claims or {}
            if wait := claims.get(LIMITED):
                await _send_json(send, 429, {
                    "error": "unavailable", "message": f"Too many tokens Coder refused came from your address: "
                    f"retry in {wait} s, with a valid Coder token (`coder tokens create`).",
                    "details": {"retry_after_s": wait}}, [(b"retry-after", str(wait).encode())])
                return True
            if claims.get(UNVERIFIED):
                await _send_json(send, 503, {
                    "error": "unavailable", "message": "Coder cannot be reached to check your token; retry shortly.",
                    "details": {"retry_after_s": 5}}, [(b"retry-after", b"5")])
                return True
            return False
        if (scope["path"] == MCP_PATH and scope["method"] != "GET") or self.authorized_header(scope) is None:
            return False  # FastMCP's own 401 on /mcp (which, stateless, serves no GET); elsewhere no token was sent
        await _send_json(send, 401, {
            "error": "unauthorized", "message": "Coder refused the token sent: create one with `coder tokens "
            "create --name fleet-mcp --lifetime 720h` and send it as Authorization: Bearer <token>.",
            "details": {"header": "Authorization", "scheme": "Bearer"}},
            [(b"www-authenticate", b'Bearer realm="fleet-mcp", error="invalid_token", '
                                   b'error_description="send your own Coder session token; no OAuth is offered"')])
        return True

    @staticmethod
    def authorized_header(scope: Scope) -> str | None:
        """The bearer credentials sent, if any."""
        return bearer(next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None))

    def _until_drained(self, receive: Receive) -> Receive:
        """A GET stream (server-to-client messages only) reads as disconnected once draining starts."""

        async def wrapped() -> Message:
            if self.drain.draining:
                return {"type": "http.disconnect"}
            message = asyncio.ensure_future(receive())
            drained = asyncio.ensure_future(self.drain.wait())
            try:
                await asyncio.wait({message, drained}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for future in (message, drained):
                    if not future.done():
                        future.cancel()
            if message.done() and not message.cancelled():
                return message.result()
            return {"type": "http.disconnect"}

        return wrapped


def build_app(server: FastMCP, settings: Settings, host: str, drain: Drain) -> ASGIApp:
    """The ASGI app for `fleet-mcp --transport http`: /healthz, then /mcp behind the Host/Origin guard, the Gate,
    the session cap."""
    from .sessions import SessionCap

    return Health(server.http_app(
        path=MCP_PATH,
        host_origin_protection=True,  # strict: every request's Host and Origin are checked
        allowed_hosts=allowed_hosts(host, settings),
        allowed_origins=allowed_origins(settings),
        session_idle_timeout=settings.session_idle_s,
        # Stateless: every request stands alone, so any replica behind a load balancer can answer it.
        stateless_http=settings.stateless,
        middleware=[Middleware(Gate, token=None if settings.auth == "coder" else settings.auth_token, drain=drain,
                               per_user=settings.auth == "coder"),
                    Middleware(SessionCap, max_sessions=settings.max_sessions,
                               max_per_client=settings.max_sessions_per_client, idle_s=settings.session_idle_s)],
    ), drain)
