"""Builds the FastMCP app; its lifespan, composed of one part for each thing it holds open with FastMCP's `|`,
opens and closes the Coder client (or each caller's) and the audit log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
from fastmcp import FastMCP
from fastmcp.server.lifespan import Lifespan, lifespan
from fastmcp.server.middleware import Middleware

from . import __version__
from .errors import Envelope
from .registry import TOOLS, instructions, register
from .serving.services import Services
from .serving.tasks import FleetTasks
from .serving.tokens import CoderTokens
from .serving.users import Users
from .settings import Settings

if TYPE_CHECKING:
    from .serving.audit import AuditLog

__all__ = ["audited", "build_server", "each_callers", "one_client"]

log = logging.getLogger("fleet_mcp")

FINISH_S = 10.0  # at shutdown, what a delete that has cancelled a build gets to request its own


def build_server(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None,
                 user: str | None = None, stopping: asyncio.Event | None = None) -> FastMCP:
    """The fleet MCP server for one Coder deployment (`transport` lets tests reach an in-process emulator).

    With `settings.audit_log` set, every tool call is also written to that file, one JSON line each (`user`:
    the token's Coder username when start-up learnt it, else each caller's). With
    `settings.auth == "coder"` each HTTP caller acts with their own Coder token (`tokens.CoderTokens`). With
    `settings.read_only` only the tools that change nothing are served. `stopping`, set by the serving loop
    when the server begins to stop, ends the waits in flight.
    """
    withheld = [spec.name for spec in TOOLS if not spec.reads_only] if settings.read_only else []
    middleware: list[Middleware] = [Envelope(withheld)]
    users = Users(settings, transport, stopping) if settings.auth == "coder" else None
    coder = each_callers(users) if users is not None else one_client(settings, transport, stopping)
    if settings.audit_log is not None:
        from .serving.audit import AuditLog

        # Outermost, so it records what the client gets: the envelope, after Envelope has shaped it.
        audit = AuditLog(settings.audit_log, secrets=[settings.coder_session_token, settings.auth_token,
                                                             settings.runner_secret],
                         user=user)
        middleware.insert(0, audit)
        coder = audited(audit) | coder  # opened before the client, closed after it
    mcp = FastMCP("fleet-mcp", version=__version__, lifespan=coder, middleware=middleware,
                  auth=CoderTokens(users) if users is not None else None)
    mcp.instructions = instructions(register(mcp, read_only=settings.read_only), read_only=settings.read_only)
    if settings.tasks != "off":
        mcp.add_extension(FleetTasks(settings.tasks, settings.wait_poll_interval_s))
    return mcp


def one_client(settings: Settings, transport: httpx.AsyncBaseTransport | None,
               stopping: asyncio.Event | None) -> Lifespan:
    """The server's own `Services` (`{"services"}`), on its token: their Coder client open while it serves."""
    @lifespan
    async def services_open(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        try:
            services = Services.open(settings, transport, stopping)
            async with services.client:
                try:
                    yield {"services": services}
                finally:
                    await services.fleet.builds.finish(FINISH_S)
        finally:
            log.info("Coder client closed")
    return services_open


def each_callers(users: Users) -> Lifespan:
    """Per-user mode's registry (`{"users"}`): every caller's Coder client closed when the server stops."""
    @lifespan
    async def users_open(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"users": users}
        finally:
            try:
                await users.aclose(finish_s=FINISH_S)
            finally:
                log.info("Coder client closed")
    return users_open


def audited(audit: AuditLog) -> Lifespan:
    """The audit log's file, held open while the server serves."""
    @lifespan
    async def audit_open(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        with audit.opened():
            yield {}
    return audit_open
