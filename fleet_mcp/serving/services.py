"""One Coder user's services, and `services_of(ctx)`, the one place tools get theirs.

A user's `Services` are a Coder client holding their token, their `Fleet` with its template catalog, their
`Waits` with its shared listing, and their request meter. The server holds one set (its own token), or in
per-user mode (`FLEET_MCP_AUTH=coder`) `users.Users` holds one per caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
from fastmcp import Context
from fastmcp.server.dependencies import get_access_token

from ..coder.client import CoderClient
from ..errors import FleetError
from ..fleet.agents import Fleet
from ..fleet.lifecycle import Lifecycle
from ..fleet.rate import Meter
from ..fleet.turns import Turns
from ..fleet.waits import Waits
from ..settings import Settings

if TYPE_CHECKING:
    from .users import Users

__all__ = ["Services", "services_of"]


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
