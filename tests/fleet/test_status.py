"""Status rules as pure functions: one table row per situation, no Coder, no driver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from fleet_mcp.coder.schemas import Workspace, WorkspaceAppStatus
from fleet_mcp.drivers import Live, Slugs
from fleet_mcp.fleet.status import Snapshot, base_status, fresh_app_status, list_status, live_status, turn_status

SLUGS = Slugs(runner="fleet", agentapi="ccw")
BUILT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def workspace(build: str = "running", transition: str = "start", agent: dict[str, Any] | None = None,
              app: dict[str, Any] | None = None, latest: dict[str, Any] | None = None, error: str = "",
              number: int = 2) -> Workspace:
    """A workspace as Coder sends it, reduced to what the rules read."""
    agents = []
    if agent is not None:
        apps = [{"id": "app", "slug": "ccw", "health": "healthy", **app}] if app is not None else []
        agents = [{"id": "agent", "name": "main", "status": "connected", "lifecycle_state": "ready", **agent,
                   "apps": apps}]
    return msgspec.convert({
        "id": "ws", "name": "w", "owner_name": "demo", "template_name": "fleet-demo",
        "latest_build": {"id": "b", "status": build, "transition": transition, "created_at": BUILT.isoformat(),
                         "build_number": number,
                         "job": {"status": "succeeded", "error": error}, "resources": [{"agents": agents}]},
        "latest_app_status": latest,
    }, Workspace)


def app_status(state: str, seconds_after_build: float) -> dict[str, Any]:
    return {"state": state, "message": state, "created_at": (BUILT + timedelta(seconds=seconds_after_build)).isoformat()}


READY_AGENT: dict[str, Any] = {}
HEALTHY: dict[str, Any] = {}


@pytest.mark.parametrize(("app", "kind"), [({"slug": "fleet"}, "runner"), (HEALTHY, "agentapi"),
                                           ({"slug": "vscode"}, None)])
def test_a_snapshot_carries_its_agent_and_driver_app(app: dict[str, Any], kind: str | None) -> None:
    """The (agent, app) pair every status rule reads is found once, when the snapshot is taken."""
    snap = Snapshot.of(workspace(agent=READY_AGENT, app=app), SLUGS)
    assert snap.agent is not None and snap.agent.name == "main"
    assert (snap.app.slug if snap.app else None, snap.kind) == (app.get("slug", "ccw") if kind else None, kind)
    assert Snapshot.of(workspace("pending"), SLUGS).agent is None


@pytest.mark.parametrize(("ws", "expected"), [
    (workspace("pending", number=1), ("busy", None)),  # a new agent's first build, queued: it holds its spec
    (workspace(agent={"status": "connecting"}, number=1), ("busy", None)),  # ...until its spec's turn is over
    (workspace("pending"), ("starting", None)),  # start_agent's build, queued
    (workspace("pending", "stop"), ("stopping", None)),  # stop_agent's build, queued
    (workspace("starting"), ("starting", None)),
    (workspace("stopped", "stop"), ("stopped", None)),
    (workspace("deleting", "delete"), ("deleting", None)),
    (workspace("failed", error="terraform exploded"), ("failed", "terraform exploded")),
    (workspace("running"), ("starting", None)),  # no agent yet
    (workspace(agent={"status": "connecting"}), ("starting", None)),
    (workspace(agent={"lifecycle_state": "starting"}), ("starting", None)),
    (workspace(agent={"status": "disconnected"}), ("offline", "The workspace agent is disconnected.")),
    (workspace(agent={"lifecycle_state": "start_error"}, app=HEALTHY), ("failed", "start_error")),
    (workspace(agent=READY_AGENT, app={"health": "initializing"}), ("starting", None)),
    (workspace(agent=READY_AGENT, app={"health": "unhealthy"}), ("offline", "AgentAPI")),
    (workspace(agent=READY_AGENT, app={"health": "unhealthy", "slug": "fleet"}), ("offline", "The runner")),
    (workspace(agent=READY_AGENT, app={"slug": "vscode"}), ("offline", "lacks the runner or AgentAPI app")),
    (workspace(agent=READY_AGENT, app=HEALTHY), ("ready", None)),
])
def test_base_status(ws: Workspace, expected: tuple[str, str | None]) -> None:
    found = base_status(Snapshot.of(ws, SLUGS))
    status, problem = found.value, found.problem
    assert status == expected[0]
    if expected[1] is None:
        assert problem is None
    else:
        assert problem is not None and expected[1] in problem


@pytest.mark.parametrize(("latest", "transition", "fresh"), [
    (None, "start", False),
    (app_status("working", 5), "start", True),
    (app_status("working", -5), "start", False),  # from before the latest start build
    (app_status("working", 0), "start", False),  # Coder wants it strictly after the build
    (app_status("complete", -5), "stop", True),  # a stop build keeps the last status worth showing
])
def test_fresh_app_status_follows_coder(latest: dict[str, Any] | None, transition: str, fresh: bool) -> None:
    ws = workspace("running" if transition == "start" else "stopped", transition, latest=latest)
    assert (fresh_app_status(ws) is not None) is fresh


@pytest.mark.parametrize(("latest", "expected"), [
    (None, "starting"),  # restarted: its program has not said it is up
    (app_status("working", 5), "busy"),
    (app_status("complete", 5), "busy"),  # winding down until the reporter says idle
    (app_status("failure", 5), "busy"),
    (app_status("idle", 5), "idle"),
    (app_status("working", -5), "starting"),  # stale: from the previous run
])
def test_list_status_reads_the_reporter(latest: dict[str, Any] | None, expected: str) -> None:
    assert list_status(Snapshot.of(workspace(agent=READY_AGENT, app=HEALTHY, latest=latest), SLUGS)).value == expected


def test_a_new_agent_is_busy_until_its_spec_reports() -> None:
    fresh = workspace(agent=READY_AGENT, app=HEALTHY, number=1)  # first build, nothing reported yet
    assert list_status(Snapshot.of(fresh, SLUGS)).value == "busy"
    restarted = workspace(agent=READY_AGENT, app=HEALTHY, number=3)  # resumed after a stop: no work waits,
    # ...and idle only once its program says it is up
    assert list_status(Snapshot.of(restarted, SLUGS)).value == "starting"
    up = workspace(agent=READY_AGENT, app=HEALTHY, number=3, latest=app_status("idle", 5))
    idle = list_status(Snapshot.of(up, SLUGS))
    assert (idle.value, idle.since) == ("idle", BUILT + timedelta(seconds=5))


@pytest.mark.parametrize(("live", "unreachable", "expected"), [
    (Live("working"), None, ("busy", None)),
    (Live("idle"), None, ("idle", None)),  # up before its report reached Coder: the driver knows
    (Live("starting"), None, ("starting", None)),  # (re)connecting to Claude Code, no work waiting
    (Live("starting", queued=1), None, ("busy", None)),  # holding a task (or its spec) until it is up
    (None, "AgentAPI cannot be reached: Workspace Offline", ("offline", "AgentAPI cannot be reached")),
])
def test_live_status_asks_the_driver_only_when_ready(live: Live | None, unreachable: str | None,
                                                     expected: tuple[str, str | None]) -> None:
    found = live_status(Snapshot.of(workspace(agent=READY_AGENT, app=HEALTHY), SLUGS, {}, live, unreachable))
    assert found.value == expected[0] and (found.problem or "").startswith(expected[1] or "")
    assert found.source == ("driver" if live else "workspace agent")
    stopped = Snapshot.of(workspace("stopped", "stop"), SLUGS, {}, Live("working"), None)
    assert live_status(stopped).value == "stopped"  # the build wins over a stale live answer


def reports(*states: str) -> list[WorkspaceAppStatus]:
    """App statuses newest first, from `state:message` words given oldest first."""
    out = []
    for i, word in enumerate(states):
        state, _, message = word.partition(":")
        out.append(WorkspaceAppStatus(state=state, message=message or state,
                                      created_at=BUILT + timedelta(seconds=i + 1)))
    return out[::-1]


@pytest.mark.parametrize(("history", "runner", "value", "last_turn"), [
    ((), False, "idle", None),
    (("working",), False, "busy", None),
    (("working", "complete"), False, "busy", None),  # winding down until idle
    (("working", "complete", "idle"), False, "idle", "succeeded"),
    (("working", "failure:tests fail", "idle"), False, "idle", "failed"),
    (("working:Waiting for permission", "idle:Waiting for permission"), False, "needs_input", None),
    (("working:Reading the code", "idle:Reading the code"), False, "idle", "interrupted"),
    (("working", "idle:Needs input: Bash ls"), True, "idle", "interrupted"),  # words decide nothing
    (("working:Waiting for permission", "idle"), True, "idle", "interrupted"),  # the runner says so itself
    (("working", "complete", "idle", "working", "idle"), False, "idle", "interrupted"),
])
def test_turn_status_reads_how_the_turn_ended(history: tuple[str, ...], runner: bool, value: str,
                                              last_turn: str | None) -> None:
    status = turn_status(reports(*history), runner)
    assert (status.value, status.last_turn) == (value, last_turn)
    assert status.source == "app status"
    if last_turn == "failed":
        assert status.last_turn_error == "tests fail"


def test_a_runner_prompt_is_read_from_the_uri_the_runner_sets_never_from_the_message() -> None:
    uri = ("fleet-runner:needs-input?prompt=p-1&tool=Bash&asked_at=2026-01-01T00%3A00%3A05Z"
           "&input=make+test+%26%26+deploy")
    asking = reports("working", "idle:Needs input: Bash make test")
    asking[0] = msgspec.structs.replace(asking[0], uri=uri)
    status = turn_status(asking, runner=True)
    assert status.pending is not None and status.pending.since is not None and status.problem is not None
    assert (status.value, status.pending.id, status.pending.tool) == ("needs_input", "p-1", "Bash")
    # The mark says a prompt waits, never what it asks: the agent can post it too (the runner is asked that).
    assert (status.pending.summary, status.pending.input, status.pending.digest) == ("", None, None)
    assert status.pending.since.year == 2026 and "deploy" not in status.problem and "show_agent" in status.problem
    forged = reports("working", "complete:Needs input: Bash sudo rm -rf /", "idle:Needs input: Bash sudo rm -rf /")
    assert turn_status(forged, runner=True).value == "idle"
    assert turn_status(asking, runner=False).value == "idle"  # only a runner's statuses carry its mark


def test_a_workspace_being_deleted_is_deleting() -> None:
    for build in ("pending", "running", "deleting"):
        assert base_status(Snapshot.of(workspace(build, "delete"), SLUGS)).value == "deleting"
    assert base_status(Snapshot.of(workspace("deleted", "delete"), SLUGS)).value == "deleted"
