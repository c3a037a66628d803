"""Who a tool call acts for in per-user mode: the Coder user whose token the HTTP caller brings.

Every HTTP request carries the caller's own Coder token (`Authorization: Bearer <token>`). `CoderTokens`, a
FastMCP token verifier, checks it with Coder (`GET /api/v2/users/me`) and remembers a valid answer for
`FLEET_MCP_AUTH_CACHE_S` (on the caller's `Services` in `users.Users`); refused tokens and guessing addresses
are kept from Coder by `guesses.Guesses`. `caller()` names the user of the request being served.
"""

from __future__ import annotations

import asyncio
import logging

from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.server.dependencies import get_access_token, get_http_request

from ..coder import errors as ce
from .guesses import Guesses
from .services import Services
from .users import Users, key_of

__all__ = ["LIMITED", "UNVERIFIED", "CoderTokens", "caller"]

log = logging.getLogger("fleet_mcp")
UNVERIFIED = "fleet_mcp_unverified"  # claim: Coder could not be asked (http.Gate answers 503)
LIMITED = "fleet_mcp_limited"  # claim: the address guessed too much; seconds to wait (http.Gate answers 429)


class CoderTokens(TokenVerifier):
    """FastMCP token verifier: a bearer token is valid when Coder says whose it is (`GET /api/v2/users/me`).

    It offers no OAuth (no authorization server, no metadata routes): users bring a token made with
    `coder tokens create`. When Coder cannot be asked, the token is let through marked unverified, and
    `http.Gate` answers 503 rather than a 401 that would send the user to make a new token.
    """

    def __init__(self, users: Users, guesses: Guesses | None = None) -> None:
        super().__init__()
        self.users = users
        settings = users.settings
        self.guesses = guesses or Guesses(settings.auth_refusals_per_minute, settings.auth_cache_s)

    async def verify_token(self, token: str) -> AccessToken | None:
        token = token.strip()
        if not token:
            return None
        now = asyncio.get_running_loop().time()
        known = self.users.known(token)
        if known is not None and known.username is not None:
            if now - known.verified_at < self.users.settings.auth_cache_s:
                return _signed_in(token, known.username)
            answer = await self._check(token, known, now)  # accepted before: asked again, never limited
            if answer is None:
                self.guesses.refusal(key_of(token))
            return answer
        key = key_of(token)
        if self.guesses.refused(key):
            return None
        address = _client_address()
        if wait := self.guesses.take(address):
            return AccessToken(token=token, client_id="limited", scopes=[], claims={LIMITED: wait})
        answer = await self._check(token, self.users.services(token), now)
        if answer is not None:
            self.guesses.accepted(address)
        else:
            self.guesses.refusal(key)
        return answer

    async def _check(self, token: str, services: Services, now: float) -> AccessToken | None:
        """Ask Coder whose `token` is: None when refused (forgotten here), marked unverified when Coder cannot say."""
        try:
            me = await services.client.me()
        except (ce.Unauthorized, ce.Forbidden):
            self.users.forget(token)
            return None
        except ce.CoderError as exc:
            log.warning("cannot check a caller's Coder token: %s", exc.message)
            return AccessToken(token=token, client_id="unverified", scopes=[], claims={UNVERIFIED: True})
        self.users.signed_in(services, me.username)
        services.verified_at = now
        return _signed_in(token, me.username)


def _signed_in(token: str, username: str) -> AccessToken:
    return AccessToken(token=token, client_id=username, scopes=[], subject=username, claims={"username": username})


def _client_address() -> str | None:
    """The address of the HTTP request being authenticated (as the trusted proxy forwards it), if any."""
    try:
        client = get_http_request().client
    except RuntimeError:
        return None
    return client.host if client is not None else None


def caller() -> str | None:
    """The Coder username of this HTTP request's caller (per-user mode), else None."""
    access = get_access_token()
    claims = access.claims if access is not None else None
    name = (claims or {}).get("username")
    return name if isinstance(name, str) else None
