"""`fleet-mcp demo`: a tour of the tools through a real MCP client, in about a minute.

The server is the one `fleet-mcp` serves, talking to the embedded Coder
emulator on real time, and the tour drives it through `fastmcp.Client` over
the MCP protocol, so every answer shown is what an orchestrator would get.
With the `runner` extra installed the agents are the real Claude Code, run by
`fleet-mcp runner` in scratch directories, with only the model scripted;
without it, the emulator's scripted AgentAPI. Nothing outside this process
and its temporary directories is created or touched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from fastmcp import Client

__all__ = ["Tour", "main", "tour"]

PROJECT = "fleet-demo"
BUILDER, SLEEPER = "builder", "sleeper"
# Prompt markers script the emulator's Claude Code: open a PR and finish in 3 s; work until interrupted.
BUILDER_SPEC = "Add a /health endpoint to the API service and open a pull request. [[pr]] [[finish:3]]"
SLEEPER_SPEC = "Investigate the flaky checkout test until it is understood. [[hang]]"
FOLLOW_UP = "Run the test suite before the release notes. [[permission]] [[finish:2]]"
# A task whose answer must fit a JSON Schema (the runner's typed answers); [[json]] answers in its shape.
VERDICT_TASK = "Is the change ready to release? [[json]] [[finish:1]]"
VERDICT = {"type": "object", "properties": {"ready": {"type": "boolean"}, "risk": {"enum": ["low", "high"]}},
           "required": ["ready", "risk"]}
# Per wait: a workspace is up in ~3 s on the emulator's real time, Claude Code in ~2 s more; a loaded machine
# (a start-up of 30 s at load 16) must not end the tour, and each wait returns as soon as its agent is there.
WAIT_S = 120.0
TOTAL_S = 300.0
CELL = 100


class StepFailed(Exception):
    """A step got an answer it cannot go on from (a tool error, or a wait that ran out)."""


def _cell(value: Any, limit: int = CELL) -> Text:
    # Text, not markup: agent output such as "[[pr]]" must print as is.
    text = "" if value is None else str(value)
    return Text(text if len(text) <= limit else text[:limit - 1] + "…")


class Tour:
    """The tour's steps over one connected `fastmcp.Client`; each prints what it did as a table."""

    def __init__(self, client: Client[Any], console: Console) -> None:
        self.client = client
        self.console = console
        self.started = time.monotonic()
        self.prompt_id = ""  # the builder's pending prompt, as show_agent named it
        self.digest = ""  # and as it showed it: an answer approves only that

    def steps(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("Projects", self.projects),
            ("Roles", self.roles),
            ("Create two agents", self.create),
            ("Wait for the builder's spec", self.watch),
            ("Show the builder", self.show),
            ("The builder's result", self.result),
            ("A follow-up that asks permission", self.follow_up),
            ("Answer it", self.answer),
            ("Review the builder's work", self.review),
            ("A typed answer", self.typed),
            ("Task history", self.history),
            ("Conversation log", self.log),
            ("Cancel the sleeper's task", self.cancel),
            ("Delete both agents", self.delete),
        ]

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's structured answer; a tool error ends the step with the error envelope."""
        result = await self.client.call_tool(tool, arguments, raise_on_error=False)
        if result.is_error:
            raise StepFailed(f"{tool} answered an error: {getattr(result.content[0], 'text', '')}")
        return dict(result.structured_content or {})

    def table(self, title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        self.console.print(table)

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    async def wait(self, names: list[str], until: list[str], what: str) -> dict[str, Any]:
        """wait_for_agents: one call instead of polling; StepFailed when it times out."""
        answer = await self.call("wait_for_agents", agent_names=names, until=until, timeout_s=WAIT_S)
        self.table(f"wait_for_agents until={'/'.join(until)} ({answer['waited_s']:.1f} s)",
                   ["agent", "status", "met", "last turn"],
                   [(a["name"], a["status"], "yes" if a["met"] else "", a["last_turn"]) for a in answer["agents"]])
        if answer["timed_out"]:
            raise StepFailed(f"gave up after {WAIT_S:.0f} s waiting for {what}: {answer['message']}")
        return answer

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
        await self.wait([BUILDER], ["idle", "needs_input", "failed"], "the builder to finish its spec")
        agents = await self.call("show_agents", agent_names=[BUILDER, SLEEPER])
        self.table("show_agents", ["agent", "status", "current task", "latest output"],
                   [(a["name"], a["status"], a["current_task"], a["latest_output"]) for a in agents["agents"]])

    async def show(self) -> None:
        agent = (await self.call("show_agent", agent_name=BUILDER))["agent"]
        fields = ["status", "status_source", "driver", "workspace_status", "role", "current_task", "total_cost_usd",
                  "problem"]
        rows = [(f, agent[f]) for f in fields]
        rows.append(("pull request", agent["metadata"]["fleet_mcp_pull_request_url"]))
        self.table(f"show_agent {BUILDER}", ["field", "value"], rows)

    async def result(self) -> None:
        r = await self.call("get_agent_result", agent_name=BUILDER)
        self.table(f"get_agent_result {BUILDER}", ["field", "value"],
                   [(f, r[f]) for f in ("outcome", "text", "pull_request_url", "num_turns", "duration_ms",
                                        "turn_cost_usd", "total_cost_usd")])

    async def follow_up(self) -> None:
        result = await self.call("start_agent_task", agent_name=BUILDER, task_description=FOLLOW_UP)
        self.table("start_agent_task", ["agent status", "task", "message"],
                   [(result["agent_status"], result["task"]["message"], result["message"])])
        await self.wait([BUILDER], ["needs_input", "idle"], "the builder to ask for permission")
        agent = (await self.call("show_agent", agent_name=BUILDER))["agent"]
        self.table(f"show_agent {BUILDER}", ["status", "waits on"], [(agent["status"], agent["problem"])])
        if agent["status"] != "needs_input" or not agent["pending"]:
            raise StepFailed(f"{BUILDER} is {agent['status']}, not waiting for permission")
        self.prompt_id, self.digest = agent["pending"]["prompt_id"], agent["pending"]["digest"]

    async def answer(self) -> None:
        answered = await self.call("answer_agent", agent_name=BUILDER, prompt_id=self.prompt_id, digest=self.digest,
                                   decision="allow")
        self.table("answer_agent decision=allow", ["agent status", "message"],
                   [(answered["agent_status"], answered["message"])])
        await self.wait([BUILDER], ["idle", "failed"], "the follow-up to finish")
        r = await self.call("get_agent_result", agent_name=BUILDER)
        self.table(f"get_agent_result {BUILDER}", ["task", "outcome", "cost so far (USD)"],
                   [(r["task"], r["outcome"], r["total_cost_usd"])])

    async def review(self) -> None:
        agent = (await self.call("show_agent", agent_name=BUILDER))["agent"]
        if agent["driver"] != "runner":
            self.table("show_agent_diff", ["note"], [("Diffs and typed answers need the runner: pip install "
                                                      "'coder-fleet-mcp[runner]'.",)])
            return
        r = await self.call("get_agent_result", agent_name=BUILDER)
        changes = r["changes"] or {}
        self.table(f"get_agent_result {BUILDER}: changes", ["branch", "files", "+", "-", "commits"],
                   [(changes.get("branch"), changes.get("files_total"), changes.get("added_lines"),
                     changes.get("removed_lines"), changes.get("commits_total"))])
        diff = await self.call("show_agent_diff", agent_name=BUILDER, scope="agent")
        self.table(f"show_agent_diff {BUILDER} scope=agent (page {diff['page']} of {diff['pages']})",
                   ["file", "diff (from its first hunk)"],
                   [(f["path"], _cell(f["diff"][max(f["diff"].find("@@"), 0):], 240)) for f in diff["files"]])
        glance = await self.call("show_agents", agent_names=[BUILDER, SLEEPER])
        self.table("show_agents", ["agent", "status", "last turn", "last turn's cost (USD)", "changes"],
                   [(a["name"], a["status"], a["last_turn"], a["last_turn_cost_usd"],
                     a["changes_summary"])
                    for a in glance["agents"]])

    async def typed(self) -> None:
        agent = (await self.call("show_agent", agent_name=BUILDER))["agent"]
        if agent["driver"] != "runner":
            return
        await self.call("start_agent_task", agent_name=BUILDER, task_description=VERDICT_TASK,
                        result_schema=VERDICT)
        await self.wait([BUILDER], ["idle", "failed"], "the typed answer")
        r = await self.call("get_agent_result", agent_name=BUILDER)
        self.table(f"get_agent_result {BUILDER} (asked with result_schema: ready, risk)", ["outcome", "structured"],
                   [(r["outcome"], r["structured"])])
        if r["structured"] is None:
            raise StepFailed(f"the typed answer did not come: {r['text']}")

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


def runner_installed() -> bool:
    """Whether the `runner` extra is there, so the tour can run the real Claude Code."""
    import importlib.util

    return importlib.util.find_spec("claude_agent_sdk") is not None


async def tour(console: Console, runtime: str | None = None) -> int:
    """Run the tour against a fresh embedded emulator; 0 when every step worked, else 1."""
    from fastmcp import Client

    from .emulator import REAL_TIME, Emulator
    from .emulator.app import running
    from .server import build_server
    from .serving.preflight import StartupError, load_settings

    runtime = runtime or ("runner" if runner_installed() else "agentapi")
    # The `fleet` seed: the demo's templates, none of its workspaces, each of which would run a Claude Code.
    emulator = Emulator(virtual=False, timings=REAL_TIME, agent_runtime=runtime, seed="fleet")
    who = ("the real Claude Code (fleet-mcp runner on the Agent SDK; only the model is scripted)"
           if runtime == "runner" else "the emulator's scripted Claude Code behind AgentAPI "
           "(pip install 'coder-fleet-mcp[runner]' for the real one)")
    console.print(Text(f"A tour of fleet-mcp: an MCP client drives the tools against the embedded Coder emulator "
                       f"on real time; the agents are {who}.", style="bold"))
    step = "connect"
    try:
        async with running(emulator) as url:
            settings = load_settings(coder_url=url, coder_session_token=emulator.token, poll_interval_s=0.2,
                                     wait_poll_interval_s=0.3)
            async with asyncio.timeout(TOTAL_S), Client(build_server(settings)) as client:
                run = Tour(client, console)
                for n, (title, action) in enumerate(run.steps(), 1):
                    step = f"{n}. {title}"
                    console.rule(Text(f"{step}  (t+{run.elapsed().strip()})", style="bold"), align="left")
                    await action()
    except StartupError as exc:
        console.print(Text(f"fleet-mcp demo: {exc}", style="bold red"))
        return 1
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
