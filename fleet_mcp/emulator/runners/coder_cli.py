"""The `coder` CLI a runner workspace has, for what a process in it asks of it: `coder exp mcp server`.

As Coder's (cli/exp_mcp.go, codersdk/toolsdk `ReportTask`, coderd/mcp `RegisterSDKTool`): an MCP server on
stdio named "Coder Agent" whose `coder_report_task` tool takes `summary` (at most 160 bytes), `link` and
`state` (working, complete, idle, failure), all required, answers `{"message":"Thanks for reporting!"}`
once the report is queued, and a reporter delivers the queue in order through the agent socket. The slug
comes from `--app-status-slug` or CODER_MCP_APP_STATUS_SLUG; without one, or when the agent socket does not
answer its ping, the tool is not offered; with no tool at all the server does not start. Banners and
warnings go to stderr, as Coder's do.

Departure: the agent socket and the agent behind it are one hop here: the emulated agent's Agent API
(`POST {CODER_AGENT_URL}/api/v2/workspaceagents/me/rpc/{Ping,UpdateAppStatus}` with CODER_AGENT_TOKEN),
which is what a real agent forwards the socket's `UpdateAppStatus` to. The user-authenticated tools
(workspaces, templates...) are not emulated: only the reporter.

Run as `python -m fleet_mcp.emulator.runners.coder_cli exp mcp server ...`, or forked by the emulator's fork
server (emulator/forks.py), which the `coder` on each runner's PATH (emulator/relay.py) asks for a copy.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import ssl
import sys
from typing import TYPE_CHECKING, Annotated, Literal

import httpx
from pydantic import Field  # at module level: the tool's annotations are resolved in this module's names

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["main", "preload"]

TOOL = "coder_report_task"
NOT_LOGGED_IN = "You are not logged in. Try logging in using 'coder login <url>'."
DESCRIPTION = """Report progress on your work.

The user observes your work through a Task UI. To keep them updated
on your progress, or if you need help - use this tool.

Good Tasks
- "Cloning the repository <repository-url>"
- "Working on <feature-name>"
- "Figuring our why <issue> is happening"

Bad Tasks
- "I'm working on it"
- "I'm trying to fix it"
- "I'm trying to implement <feature-name>"

Use the "state" field to indicate your progress. Periodically report
progress with state "working" to keep the user updated. It is not possible to send too many updates!

ONLY report a "complete", "idle", or "failure" state if you have FULLY completed the task.
"""


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context a process: each client making its own loads the CA bundle again (tens of ms of CPU)."""
    return httpx.create_ssl_context()


class AgentSocket:
    """The workspace agent's Agent API, as the socket reaches it."""

    def __init__(self, url: str, token: str) -> None:
        self.base = url.rstrip("/") + "/api/v2/workspaceagents/me/rpc/"
        self.headers = {"Coder-Session-Token": token}

    async def call(self, method: str, body: dict | None = None) -> None:
        async with httpx.AsyncClient(base_url=self.base, headers=self.headers, timeout=10, verify=_tls()) as client:
            answer = await client.post(method, json=body or {})
        if not answer.is_success:
            raise RuntimeError(f"{method}: HTTP {answer.status_code}: {answer.text[:200]}")


def serve(slug: str, allowed: list[str]) -> int:
    url, token = os.environ.get("CODER_AGENT_URL", ""), os.environ.get("CODER_AGENT_TOKEN", "")
    say("URL            : Not configured")
    say("Authentication : None")
    socket: AgentSocket | None = None
    if not slug:
        say("Task reporter  : Disabled")
        say("WARN: CODER_MCP_APP_STATUS_SLUG must be set")
    elif not (url and token):
        say("Task reporter  : Disabled")
        say("WARN: Failed to connect to agent socket: no agent socket")
    else:
        socket = AgentSocket(url, token)
        try:
            asyncio.run(socket.call("Ping"))
            say("Task reporter  : Enabled")
        except (httpx.HTTPError, RuntimeError) as exc:
            say("Task reporter  : Disabled")
            say(f"WARN: Agent socket ping failed: {exc}")
            socket = None
    if socket is None:  # the user-authenticated tools are not emulated: nothing could be offered
        say(NOT_LOGGED_IN)
        return 1
    from fastmcp import FastMCP  # only now: a CLI that cannot report exits without the seconds this takes

    mcp = FastMCP("Coder Agent")
    if not allowed or TOOL in allowed:
        _add_reporter(mcp, socket, slug)
    say("Starting MCP server")
    mcp.run(show_banner=False)
    return 0


def _add_reporter(mcp: FastMCP, socket: AgentSocket, slug: str) -> None:
    from fastmcp.exceptions import ToolError

    from ..agentapi.session import Reporter

    queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
    gate = Reporter()
    sender: list[asyncio.Task[None]] = []

    async def deliver() -> None:
        while True:
            state, summary, link = await queue.get()
            try:
                await socket.call("UpdateAppStatus", {"slug": slug, "state": state.upper(), "message": summary,
                                                      "uri": link})
            except (httpx.HTTPError, RuntimeError) as exc:
                say(f"WARN: Failed to report task status: {exc}")

    @mcp.tool(name=TOOL, description=DESCRIPTION)
    async def report_task(
        summary: Annotated[str, Field(description="A concise summary of your current progress on the task. This "
                                      "must be less than 160 characters in length and must not include newlines or "
                                      "other control characters.")],
        link: Annotated[str, Field(description="A link to a relevant resource, such as a PR or issue.")],
        state: Annotated[Literal["working", "complete", "idle", "failure"], Field(
            description="The state of your task. This can be one of the following: working, complete, idle, or "
                        "failure. Select the state that best represents your current progress.")],
    ) -> dict[str, str]:
        if len(summary.encode()) > 160:
            raise ToolError("summary must be less than 160 characters")
        if not sender:
            sender.append(asyncio.get_running_loop().create_task(deliver()))
        report = gate.accept(state, summary, link, self_reported=True)
        if report is not None:
            queue.put_nowait((report.state, report.summary, report.link))
        return {"message": "Thanks for reporting!"}


def preload() -> None:
    """Import what serving takes, by serving a listing and a refused report in memory (the fork server does, once
    for every copy it forks: what fastmcp imports only as it serves would otherwise be imported by each copy)."""
    import mcp.server.stdio  # noqa: F401 - what serving on stdio imports
    from fastmcp import Client, FastMCP

    server = FastMCP("Coder Agent")
    _add_reporter(server, AgentSocket("http://127.0.0.1", ""), "preload")

    async def serve_once() -> None:
        async with Client(server) as client:
            await client.list_tools()
            await client.call_tool(TOOL, {"summary": "x" * 161, "link": "", "state": "idle"}, raise_on_error=False)

    asyncio.run(serve_once())
    _tls()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:3] != ["exp", "mcp", "server"]:
        say(f"coder (emulated): only `exp mcp server` is emulated, not {' '.join(args[:3])!r}")
        return 1
    parser = argparse.ArgumentParser(prog="coder exp mcp server")
    parser.add_argument("--app-status-slug", default=os.environ.get("CODER_MCP_APP_STATUS_SLUG", ""))
    parser.add_argument("--allowed-tools", default=os.environ.get("CODER_MCP_ALLOWED_TOOLS", ""))
    parser.add_argument("--instructions", default="")
    options, _ = parser.parse_known_args(args[3:])
    return serve(options.app_status_slug, [t for t in options.allowed_tools.split(",") if t])


if __name__ == "__main__":
    sys.exit(main())
