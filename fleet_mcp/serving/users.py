"""Each caller's services in per-user mode (`FLEET_MCP_AUTH=coder`): a bounded registry keyed by token hash.

`Users` opens a caller's `Services` on first use, keyed by the token's SHA-256 (never the token), keeps at most
`FLEET_MCP_MAX_USERS` (the least recently used go, their Coder client closed), and gives every token of one
Coder user one request meter. Who a token belongs to is `tokens.CoderTokens`' to decide.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict

import httpx

from ..coder.client import CoderClient
from ..fleet.rate import Meter
from ..settings import Settings
from .services import Services

__all__ = ["Users", "key_of"]


def key_of(token: str) -> str:
    """What a token is known by here: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


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
        """Coder named the token's user: every token of one user counts against one rate share (one `Meter`)."""
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
