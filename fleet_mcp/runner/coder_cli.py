"""App statuses through Coder's own CLI: `coder exp mcp server`, an MCP server on stdio whose
`coder_report_task` tool reports through the workspace agent's socket (the Agent API's `UpdateAppStatus`,
the successor of the deprecated PATCH route; cli/exp_mcp.go). The runner is its MCP client.

The CLI gets only what it needs (PATH, HOME, the agent's URL, token and socket path, the app's slug): not the
runner's own variables, and not `CODER_MCP_AI_AGENTAPI_URL`, with which the CLI would turn an `idle` into
`working` and watch a screen the runner does not have. The tool answers once the status is queued in the
CLI, which delivers it over the socket at once and logs (to its stderr) what the agent refuses.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import shutil
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["TOOL", "CoderCLI"]

log = logging.getLogger("fleet_mcp.runner")
TOOL = "coder_report_task"
START_S = 30.0
CALL_S = 10.0
PASSED = ("PATH", "HOME", "TMPDIR", "CODER_AGENT_SOCKET_PATH")


class CoderCLI:
    """A running `coder exp mcp server` that offers `coder_report_task`; `open` answers None when the
    workspace has no such CLI, or its CLI cannot report (no agent socket, an older CLI, a failed start)."""

    def __init__(self, session: ClientSession) -> None:
        self._session = session

    @classmethod
    async def open(cls, stack: AsyncExitStack, slug: str, agent_url: str, token: str) -> CoderCLI | None:
        """Start the CLI (its agent's URL and token passed on, as an older CLI reports with them)."""
        found = shutil.which("coder")
        if found is None:
            return None
        # The MCP SDK's own client (claude-agent-sdk imports the SDK already; fastmcp's client on top cost each
        # runner about a second of CPU), imported off the event loop: the API answers meanwhile.
        await asyncio.to_thread(importlib.import_module, "mcp.client.stdio")
        from mcp import ClientSession, StdioServerParameters, stdio_client

        env = {k: os.environ[k] for k in PASSED if k in os.environ} | {
            "CODER_MCP_APP_STATUS_SLUG": slug, "CODER_AGENT_URL": agent_url, "CODER_AGENT_TOKEN": token}
        server = StdioServerParameters(command=found, args=["exp", "mcp", "server", f"--allowed-tools={TOOL}"],
                                       env=env)
        try:
            # Its stderr (start-up banners in its own format) is not the runner's log.
            errors = stack.enter_context(open(os.devnull, "w"))  # closed with the stack
            read, write = await stack.enter_async_context(stdio_client(server, errlog=errors))
            session = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=START_S))
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
        except Exception as exc:  # noqa: BLE001 - any failure to start means: report the other way
            log.info("app statuses: `coder exp mcp server` did not start (%s): reporting with PATCH",
                     type(exc).__name__)
            return None
        if TOOL not in tools:
            log.info("app statuses: this workspace's `coder exp mcp server` offers no %s (no agent socket): "
                     "reporting with PATCH", TOOL)
            return None
        log.info("app statuses: reporting through `coder exp mcp server` (%s)", found)
        return cls(session)

    async def report(self, state: str, message: str, uri: str) -> None:
        """Hand one status to the CLI; raises when it refuses it or is gone."""
        answer = await self._session.call_tool(TOOL, {"summary": message, "link": uri, "state": state},
                                               read_timeout_seconds=CALL_S)
        if getattr(answer, "is_error", False):
            raise RuntimeError(f"{TOOL} refused the status")

