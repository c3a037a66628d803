"""Who a tool call acts for: the server's one Coder user, or (`FLEET_MCP_AUTH=coder`) each caller as themselves.

In per-user mode every HTTP request carries the caller's own Coder token
(`Authorization: Bearer <token>`). `CoderTokens`, a FastMCP token verifier,
checks it with Coder (`GET /api/v2/users/me`) and remembers a valid answer for
`FLEET_MCP_AUTH_CACHE_S`, keyed by the token's SHA-256 (never the token); refused
tokens and guessing addresses are kept from Coder by `guesses.Guesses`. The
caller's `Services` (a Coder client holding their token, their `Fleet` with its
template catalog, their `Waits` with its shared listing, their request meter)
live in `Users`, a bounded LRU registry keyed the same way; an evicted user's
client is closed. `services_of(ctx)` is the one place tools get their services.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import httpx
from fastmcp import Context
from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.server.dependencies import get_access_token, get_http_request

from ..fleet.budget import Meter
from ..coder import errors as ce
from ..coder.client import CoderClient
from ..errors import FleetError
from ..fleet.agents import Fleet
from .guesses import Guesses
from ..fleet.lifecycle import Lifecycle
from ..settings import Settings
from ..fleet.turns import Turns
from ..fleet.waits import Waits

__all__ = ["LIMITED", "UNVERIFIED", "CoderTokens", "Services", "Users", "caller", "key_of", "services_of"]

log = logging.getLogger("fleet_mcp")
UNVERIFIED = "fleet_mcp_unverified"  # claim: Coder could not be asked (http.Gate answers 503)
LIMITED = "fleet_mcp_limited"  # claim: the address guessed too much; seconds to wait (http.Gate answers 429)


def key_of(token: str) -> str:
    """What a token is known by here: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Services:
    """One Coder user's services: every Coder request they lead to is made with that user's token."""

    client: CoderClient
    fleet: Fleet
    lifecycle: Lifecycle
    turns: Turns
    waits: Waits
    meter: Meter
    username: str | None = None
    verified_at: float = field(default=float("-inf"))
    token: str | None = field(default=None, repr=False)  # per-user mode: redacted from the audit log (any caller's)

    @classmethod
    def open(cls, settings: Settings, transport: httpx.AsyncBaseTransport | None = None,
             stopping: asyncio.Event | None = None) -> Services:
        """Services acting with `settings`' token (no request is sent yet); `stopping` ends their waits."""
        meter = Meter(settings.rate_share)
        client = settings.coder_client(transport, on_request=meter.note)
        fleet = Fleet(client, settings)
        waits = Waits(fleet, meter, stopping)
        return cls(client, fleet, Lifecycle(fleet), Turns(fleet), waits, meter)


class Users:
    """Each caller's `Services`, keyed by the hash of their token; the least recently used go beyond `max_users`."""

    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None,
                 stopping: asyncio.Event | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self._stopping = stopping
        self._by_key: OrderedDict[str, Services] = OrderedDict()
        self._meters: dict[str, Meter] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_key)

    def tokens(self) -> list[str]:
        """The tokens of the users signed in here (Coder accepted them)."""
        return [s.token for s in self._by_key.values() if s.token and s.username is not None]

    def known(self, token: str) -> Services | None:
        """The services of this token's holder if they are open, else None (nothing is opened)."""
        return self._by_key.get(key_of(token))

    def services(self, token: str) -> Services:
        """The services of this token's holder, opened on first use."""
        key = key_of(token)
        found = self._by_key.get(key)
        if found is None:
            found = Services.open(self.settings.for_token(token), self._transport, self._stopping)
            found.token = token
            self._by_key[key] = found
            while len(self._by_key) > self.settings.max_users:
                _, evicted = self._by_key.popitem(last=False)
                self._close_later(evicted.client)
        self._by_key.move_to_end(key)
        return found

    def signed_in(self, services: Services, username: str) -> None:
        """Coder named the token's user: every token of one user counts against one budget (one `Meter`)."""
        services.username = username
        meter = self._meters.setdefault(username, services.meter)
        services.meter = services.waits.meter = meter
        services.client.on_request = meter.note
        if len(self._meters) > 2 * self.settings.max_users:  # forget the meters of users no longer served
            served = {s.username for s in self._by_key.values()}
            self._meters = {name: m for name, m in self._meters.items() if name in served}

    def forget(self, token: str) -> None:
        """Drop a token Coder refused (its client is closed)."""
        evicted = self._by_key.pop(key_of(token), None)
        if evicted is not None:
            self._close_later(evicted.client)

    def _close_later(self, client: CoderClient) -> None:
        task = asyncio.get_running_loop().create_task(client.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self, finish_s: float = 0.0) -> None:
        """Close every user's Coder client (the server's lifespan ends), once the builds that must not stop
        halfway have been requested (within `finish_s`)."""
        await asyncio.gather(*(s.fleet.builds.finish(finish_s) for s in self._by_key.values()))
        clients = [s.client for s in self._by_key.values()]
        self._by_key.clear()
        await asyncio.gather(*(c.aclose() for c in clients), *self._closing, return_exceptions=True)


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


def services_of(ctx: Context) -> Services:
    """The services a tool call acts with: the caller's own in per-user mode, else the server's one set."""
    shared: Services | None = ctx.lifespan_context.get("services")
    if shared is not None:
        return shared
    users: Users = ctx.lifespan_context["users"]
    access = get_access_token()
    if access is None:  # the HTTP layer lets no such call through; this is for any other way in
        raise FleetError("unauthorized", "Per-user mode needs the caller's Coder token (Authorization: Bearer).")
    return users.services(access.token)
