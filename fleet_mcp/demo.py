"""`fleet-mcp demo`: a tour of the ten tools through a real MCP client, in under a minute.

The server is the one `fleet-mcp` serves, talking to the embedded Coder
emulator on real time, and the tour drives it through `fastmcp.Client` over
the MCP protocol, so every answer shown is what an orchestrator would get.
The emulator lives in this process: nothing outside it is created or touched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Tour", "main", "tour"]

PROJECT = "fleet-demo"
BUILDER, SLEEPER = "builder", "sleeper"
# Prompt markers script the emulator's Claude Code: open a PR and finish in 3 s; work until interrupted.
BUILDER_SPEC = "Add a /health endpoint to the API service and open a pull request. [[pr]] [[finish:3]]"
SLEEPER_SPEC = "Investigate the flaky checkout test until it is understood. [[hang]]"
FOLLOW_UP = "Write release notes for the /health endpoint. [[finish:2]]"
WAIT_S = 20.0  # per wait; a workspace is up in ~3 s on the emulator's real time
POLL_S = 0.4
TOTAL_S = 55.0
CELL = 100


class StepFailed(Exception):
    """A step got an answer it cannot go on from (a tool error, or a wait that ran out)."""


def _cell(value: Any, limit: int = CELL) -> Text:
    # Text, not markup: agent output such as "[[pr]]" must print as is.
    text = "" if value is None else str(value)
    return Text(text if len(text) <= limit else text[:limit - 1] + "…")


class Tour:
    """The tour's steps over one connected `fastmcp.Client`; each prints what it did as a table."""

    def __init__(self, client, console: Console) -> None:
        self.client = client
        self.console = console
        self.started = time.monotonic()

    def steps(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("Projects", self.projects),
            ("Roles", self.roles),
            ("Create two agents", self.create),
            ("Watch them work", self.watch),
            ("Show the builder", self.show),
            ("Give the builder a follow-up task", self.follow_up),
            ("Task history", self.history),
            ("Conversation log", self.log),
            ("Cancel the sleeper's task", self.cancel),
            ("Delete both agents", self.delete),
        ]

    async def call(self, tool: str, **arguments: Any) -> dict:
        """The tool's structured answer; a tool error ends the step with the error envelope."""
        result = await self.client.call_tool(tool, arguments, raise_on_error=False)
        if result.is_error:
            raise StepFailed(f"{tool} answered an error: {result.content[0].text}")
        return result.structured_content

    def table(self, title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        self.console.print(table)

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    async def live(self) -> dict[str, str]:
        # show_agent asks AgentAPI; list_agents reads Coder's app statuses, which say `complete`
        # a moment before AgentAPI is ready for the next message.
        return {name: (await self.call("show_agent", agent_name=name))["agent"]["status"]
                for name in (BUILDER, SLEEPER)}

    async def wait_for(self, what: str, done: Callable[[dict[str, str]], bool]) -> list[tuple[str, ...]]:
        """Poll show_agent until `done(statuses)`; the status changes seen, as table rows."""
        deadline = time.monotonic() + WAIT_S
        seen: list[tuple[str, ...]] = []
        while True:
            now = await self.live()
            row = (now.get(BUILDER, "-"), now.get(SLEEPER, "-"))
            if not seen or seen[-1][1:] != row:
                seen.append((self.elapsed(), *row))
            if done(now):
                return seen
            if time.monotonic() >= deadline:
                raise StepFailed(f"gave up after {WAIT_S:.0f} s waiting for {what}; last statuses {now}")
            await asyncio.sleep(POLL_S)

    # --- the steps ------------------------------------------------------------

    async def projects(self) -> None:
        projects = (await self.call("list_agent_projects"))["projects"]
        self.table("list_agent_projects", ["name", "display name", "description"],
                   [(p["name"], p["display_name"], p["description"]) for p in projects])

    async def roles(self) -> None:
        roles = (await self.call("list_agent_roles", project=PROJECT))["roles"]
        self.table(f"list_agent_roles project={PROJECT}", ["role", "display name", "description"],
                   [(r["name"], r["display_name"], r["description"]) for r in roles])

    async def create(self) -> None:
        rows = []
        for name, role, spec in ((BUILDER, "coder", BUILDER_SPEC), (SLEEPER, "operator", SLEEPER_SPEC)):
            agent = (await self.call("create_agent", name=name, project=PROJECT, role=role, spec=spec))["agent"]
            rows.append((agent["name"], agent["role"], agent["status"], agent["workspace_status"], agent["spec"]))
        self.table("create_agent", ["agent", "role", "status", "workspace", "spec"], rows)

    async def watch(self) -> None:
        seen: set[str] = set()

        def builder_done(now: dict[str, str]) -> bool:
            seen.add(now.get(BUILDER, ""))
            return "busy" in seen and now.get(BUILDER) == "idle" and now.get(SLEEPER) == "busy"

        rows = await self.wait_for("the builder to finish its spec", builder_done)
        self.table("show_agent, polled", ["after", BUILDER, SLEEPER], rows)

    async def show(self) -> None:
        agent = (await self.call("show_agent", agent_name=BUILDER))["agent"]
        fields = ["status", "workspace_status", "role", "project", "current_task", "problem"]
        rows = [(f, agent[f]) for f in fields]
        rows.append(("pull request", agent["metadata"]["fleet_mcp_pull_request_url"]))
        self.table(f"show_agent {BUILDER}", ["field", "value"], rows)

    async def follow_up(self) -> None:
        result = await self.call("start_agent_task", agent_name=BUILDER, task_description=FOLLOW_UP)
        self.table("start_agent_task", ["agent status", "task", "message"],
                   [(result["agent_status"], result["task"]["message"], result["message"])])
        seen: set[str] = set()

        def finished(now: dict[str, str]) -> bool:
            seen.add(now.get(BUILDER, ""))
            return "busy" in seen and now.get(BUILDER) == "idle"

        rows = await self.wait_for("the follow-up task to finish", finished)
        self.table("show_agent, polled", ["after", BUILDER, SLEEPER], rows)

    async def history(self) -> None:
        page = await self.call("show_agent_task_history", agent_name=BUILDER, page_size=10)
        self.table(f"show_agent_task_history {BUILDER} (newest first, {page['total_count']} reports)",
                   ["time", "state", "attention", "message", "link"],
                   [(t["created_at"][11:19], t["state"], "yes" if t["needs_user_attention"] else "",
                     t["message"], t["uri"]) for t in page["tasks"]])

    async def log(self) -> None:
        page = await self.call("show_agent_log", agent_name=BUILDER, page_size=10)
        self.table(f"show_agent_log {BUILDER} (newest first, {page['total_count']} messages)",
                   ["id", "role", "content"],
                   [(m["id"], m["role"], _cell(m["content"], 240)) for m in page["messages"]])

    async def cancel(self) -> None:
        result = await self.call("cancel_agent_task", agent_name=SLEEPER)
        self.table(f"cancel_agent_task {SLEEPER}", ["agent status", "task", "message"],
                   [(result["agent_status"], result["task"]["message"], result["message"])])
        if result["agent_status"] != "idle":
            raise StepFailed(f"{SLEEPER} is still {result['agent_status']} after the interrupt")

    async def delete(self) -> None:
        rows = []
        for name in (BUILDER, SLEEPER):
            result = await self.call("delete_agent", agent_name=name)
            rows.append((result["deleted_agent"]["name"], result["message"]))
        self.table("delete_agent", ["agent", "message"], rows)
        agents = (await self.call("list_agents"))["agents"]
        self.table("list_agents", ["agent", "status"], [(a["name"], a["status"]) for a in agents])


async def tour(console: Console) -> int:
    """Run the tour against a fresh embedded emulator; 0 when every step worked, else 1."""
    import httpx
    from fastmcp import Client

    from .emulator import REAL_TIME, Emulator
    from .preflight import StartupError, load_settings
    from .server import build_server

    emulator = Emulator(virtual=False, timings=REAL_TIME)
    try:
        settings = load_settings(coder_url="http://emulator.local", coder_session_token=emulator.token,
                                 poll_interval_s=0.2)
    except StartupError as exc:
        console.print(Text(f"fleet-mcp demo: {exc}", style="bold red"))
        return 1
    server = build_server(settings, transport=httpx.ASGITransport(app=emulator.app))
    console.print(Text("A tour of fleet-mcp: an MCP client drives the ten tools against the embedded "
                       "Coder emulator on real time.", style="bold"))
    step = "connect"
    try:
        async with asyncio.timeout(TOTAL_S), Client(server) as client:
            run = Tour(client, console)
            for n, (title, action) in enumerate(run.steps(), 1):
                step = f"{n}. {title}"
                console.rule(Text(f"{step}  (t+{run.elapsed().strip()})", style="bold"), align="left")
                await action()
    except StepFailed as exc:
        console.print(Text(f"fleet-mcp demo: step {step} failed: {exc}", style="bold red"))
        return 1
    except TimeoutError:
        console.print(Text(f"fleet-mcp demo: step {step} failed: the tour ran over {TOTAL_S:.0f} s",
                           style="bold red"))
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug or broken install: still one clear line
        console.print(Text(f"fleet-mcp demo: step {step} failed: {type(exc).__name__}: {exc}", style="bold red"))
        return 1
    console.print(Text(f"Tour complete in {run.elapsed().strip()}.", style="bold green"))
    return 0


def main() -> int:
    """Entry point of `fleet-mcp demo`: exit code 0 on success, 1 when a step fails."""
    try:
        return asyncio.run(tour(Console()))
    except KeyboardInterrupt:
        return 130
