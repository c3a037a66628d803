"""App statuses to Coder, as its own reporter sends them: through Coder's CLI (`coder exp mcp server`'s
`coder_report_task`, over the agent socket) where the workspace has it, else (and whenever the CLI fails)
PATCH /api/v2/workspaceagents/me/app-status with the workspace agent's token. In order, one at a time,
never blocking a turn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlencode

import httpx

from .coder_cli import CoderCLI

__all__ = ["NEEDS_INPUT_URI", "PR_LINK", "Reporter", "first_line", "needs_input_uri", "pull_request_url"]

log = logging.getLogger("fleet_mcp.runner")
PR_LINK = re.compile(r"https?://\S+/(?:pull|pulls|merge_requests|pull-requests)/\d+")
MESSAGE_MAX = 160  # Coder refuses longer messages
NEEDS_INPUT = "Needs input: "
# How lists see that a prompt waits (specs/runner.md): a status's `uri`, which agent text never reaches (a turn's
# `uri` is a pull-request link, always http(s)). It carries no input: the agent can post statuses too, so the
# fleet reads what a prompt asks from the runner alone. The message is for people.
NEEDS_INPUT_URI = "fleet-runner:needs-input?"
READY = "Ready for a task"
FLUSH_S = 2.0
GONE = (404, 405)  # the route itself is missing: an unknown app slug is a 400
QUEUE_MAX = 100


def first_line(text: str, limit: int = MESSAGE_MAX) -> str:
    """The first non-empty line of `text`, at most `limit` UTF-8 bytes (Coder measures bytes), '...' when cut."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(line.encode()) <= limit:
        return line
    return line.encode()[:limit - 3].decode(errors="ignore") + "..."


def needs_input_uri(prompt_id: str, tool: str, asked_at: str) -> str:
    """The `uri` of a needs-input status: the prompt's id, tool and when it was asked."""
    return NEEDS_INPUT_URI + urlencode({"prompt": prompt_id, "tool": tool, "asked_at": asked_at})


def pull_request_url(text: str) -> str | None:
    """The first pull-request link in `text`, trailing punctuation dropped."""
    found = PR_LINK.search(text or "")
    return found.group(0).rstrip(".,;:)]}>'\"") if found else None


class Reporter:
    """Queues app statuses and sends them in order; does nothing when Coder gave no agent URL and token."""

    def __init__(self, agent_url: str | None, token: str | None, slug: str) -> None:
        self.enabled = bool(agent_url and token)
        self._agent_url = (agent_url or "").rstrip("/")
        self._url = f"{self._agent_url}/api/v2/workspaceagents/me/app-status"
        self._token = token or ""
        self._slug = slug
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        self._failing = False
        self._gone = False
        self._task: asyncio.Task[None] | None = None
        self._cli: CoderCLI | None = None
        self._cli_task: asyncio.Task[None] | None = None
        self._cli_settled = asyncio.Event()

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._send_all())
            self._cli_task = asyncio.create_task(self._keep_cli())

    async def route(self) -> str:
        """How statuses go once Coder's CLI has started or failed to (waited for): "cli" or "patch"; "off"
        when the reporter is not running. Until then they go with PATCH: the CLI's start delays none."""
        if self._cli_task is None:
            return "off"
        await self._cli_settled.wait()
        return "cli" if self._cli is not None else "patch"

    async def stop(self) -> None:
        """Sends what is queued (a few seconds at most), then stops."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), 5)
        for task in (self._task, self._cli_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def delivered(self, within_s: float = FLUSH_S) -> None:
        """Wait (bounded) until what is queued has reached Coder, so an answer given after it is not
        contradicted by an older status (a wait reading `idle` just after a task was accepted)."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), within_s)

    def working(self, prompt: str) -> None:
        self._put("working", first_line(prompt) or "Working")

    def ready(self) -> None:
        """Claude Code is up with nothing to do: after a (re)start, a list reads the agent starting until this."""
        self._put("idle", READY)

    def needs_input(self, prompt_id: str, tool: str, summary: str, asked_at: str) -> None:
        self._put("idle", first_line(f"{NEEDS_INPUT}{tool} {summary}"),
                  needs_input_uri(prompt_id, tool, asked_at))

    def finished(self, text: str, is_error: bool, uri: str | None, more: bool = False,
                 interrupted: bool = False) -> None:
        """A turn ended; `more` when a queued task starts at once, so no `idle` tells Coder the agent waits.
        An interrupted turn neither completed nor failed: an `idle` alone says so, as Coder's own reporter does
        after an interrupt (the fleet reads `interrupted`); with a queued task next it is a `failure` (no idle)."""
        if interrupted and not more:
            self._put("idle", first_line(text) or "Interrupted", uri)
            return
        message = first_line(text) or ("Failed" if is_error else "Done")
        self._put("failure" if is_error else "complete", message, uri)
        if not more:
            self._put("idle", message, uri)

    def _put(self, state: str, message: str, uri: str | None = None) -> None:
        if not self.enabled:
            return
        try:
            self._queue.put_nowait({"app_slug": self._slug, "state": state, "message": message, "uri": uri or ""})
        except asyncio.QueueFull:
            log.warning("app status %s dropped: Coder is not taking statuses", state)

    async def _keep_cli(self) -> None:
        """Start Coder's CLI and keep it (its client lives in this task) until the reporter stops."""
        async with AsyncExitStack() as stack:
            try:
                self._cli = await CoderCLI.open(stack, self._slug, self._agent_url, self._token)
            finally:
                self._cli_settled.set()
            if self._cli is not None:
                await asyncio.get_running_loop().create_future()  # until cancelled: the stack then ends the CLI

    async def _send_all(self) -> None:
        async with httpx.AsyncClient(timeout=10, headers={"Coder-Session-Token": self._token}) as client:
            while True:
                body = await self._queue.get()
                try:
                    if (cli := self._cli) is not None:
                        try:
                            await cli.report(body["state"], body["message"], body["uri"])
                            continue
                        except Exception as exc:  # noqa: BLE001 - whatever broke, the PATCH still reports
                            log.warning("app statuses: `coder exp mcp server` failed (%s): reporting with PATCH "
                                        "from now on", type(exc).__name__)
                            self._cli = None
                            if self._cli_task is not None:
                                self._cli_task.cancel()
                    await self._send(client, body)
                finally:
                    self._queue.task_done()

    async def _send(self, client: httpx.AsyncClient, body: dict[str, Any]) -> None:
        try:
            response = await client.patch(self._url, json=body)
            problem = None if response.is_success else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        else:
            if response.status_code in GONE and not self._gone:  # once: every later status fails the same way
                self._gone = True
                log.error("Coder no longer serves PATCH /api/v2/workspaceagents/me/app-status (HTTP %s): this "
                          "agent's app statuses are lost, so fleet lists and waits cannot see its turns. The route "
                          "is deprecated since Coder v2.31.1; its successor is the Agent API's UpdateAppStatus "
                          "(the agent socket). See specs/runner.md.", response.status_code)
            if self._gone:
                self._failing = True
                return
        if problem and not self._failing:  # once per outage, so a down Coder does not flood the log
            log.warning("could not report app status %r to Coder: %s", body["state"], problem)
        self._failing = bool(problem)
