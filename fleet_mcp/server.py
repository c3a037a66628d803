"""Builds the FastMCP app; its lifespan opens and closes the Coder client (and the audit log)."""

from __future__ import annotations

from typing import Any

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import nullcontext

import httpx
from fastmcp import FastMCP
from fastmcp.server.lifespan import lifespan
from fastmcp.server.middleware import Middleware

from . import __version__
from .settings import Settings
from .serving.services import Services
from .serving.tokens import CoderTokens
from .serving.users import Users
from .errors import Envelope
from .registry import TOOLS, instructions, register
from .serving.tasks import FleetTasks

__all__ = ["build_server"]

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
    audit = None
    if settings.audit_log is not None:
        from .serving.audit import AuditLog

        # Outermost, so it records what the client gets: the envelope, after Envelope has shaped it.
        audit = AuditLog(settings.audit_log, secrets=[settings.coder_session_token, settings.auth_token,
                                                             settings.runner_secret],
                         user=user)
        middleware.insert(0, audit)
    users = Users(settings, transport, stopping) if settings.auth == "coder" else None

    @lifespan
    async def open_client(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        with audit.opened() if audit else nullcontext():
            try:
                if users is not None:
                    try:
                        yield {"users": users}
                    finally:
                        await users.aclose(finish_s=FINISH_S)
                else:
                    services = Services.open(settings, transport, stopping)
                    async with services.client:
                        try:
                            yield {"services": services}
                        finally:
                            await services.fleet.builds.finish(FINISH_S)
            finally:
                log.info("Coder client closed")

    mcp = FastMCP("fleet-mcp", version=__version__, lifespan=open_client, middleware=middleware,
                  auth=CoderTokens(users) if users is not None else None)
    mcp.instructions = instructions(register(mcp, read_only=settings.read_only), read_only=settings.read_only)
    if settings.tasks != "off":
        mcp.add_extension(FleetTasks(settings.tasks, settings.wait_poll_interval_s))
    return mcp
